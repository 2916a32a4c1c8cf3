# CPACK_PROJECT_CONFIG_FILE: run by cpack, after the build. Works out the Depends:
# of the package from the libraries the built files need (packaging/shlibdeps.sh,
# dpkg-shlibdeps' method without dpkg-dev), and adds what symbols cannot say:
#  - libggml0 (>= 0.27.0): the plugin implements ggml's backend interface (API v3),
#    whatever symbols it happens to use;
#  - systemd-sysusers: postinst creates the user ggml-remote from sysusers.d.
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_DEBIAN_PACKAGE_DEPENDS)
  execute_process(
    COMMAND sh ${CPACK_GGML_REMOTE_SHLIBDEPS} --at-least libggml0=0.27.0 ${CPACK_GGML_REMOTE_ELF_FILES}
    OUTPUT_VARIABLE ggml_remote_depends
    OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE ggml_remote_result)
  if(NOT ggml_remote_result EQUAL 0 OR ggml_remote_depends STREQUAL "")
    message(FATAL_ERROR "cpack-depends.cmake: shlibdeps.sh failed (${ggml_remote_result}); cannot write Depends:")
  endif()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "${ggml_remote_depends}, systemd | systemd-standalone-sysusers | systemd-sysusers")
  message(STATUS "ggml-remote Depends: ${CPACK_DEBIAN_PACKAGE_DEPENDS}")
endif()
