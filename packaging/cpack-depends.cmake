# CPACK_PROJECT_CONFIG_FILE: run by cpack, after the build. The packages' Depends:
# come from dpkg-shlibdeps (CPACK_DEBIAN_PACKAGE_SHLIBDEPS, package.cmake), which is
# in dpkg-dev, and CPack picks the files to give it with `file`: say which is missing
# and how to get it, before CPack's own error. (`make deb` installs both in the
# build root when they are missing.)
if(CPACK_GENERATOR STREQUAL "DEB")
  find_program(GGML_REMOTE_DPKG_SHLIBDEPS dpkg-shlibdeps)
  find_program(GGML_REMOTE_FILE file)
  if(NOT GGML_REMOTE_DPKG_SHLIBDEPS OR NOT GGML_REMOTE_FILE)
    message(FATAL_ERROR "cpack-depends.cmake: dpkg-shlibdeps or file is missing (apt-get install dpkg-dev file): "
                        "they work out the packages' Depends:")
  endif()
endif()
