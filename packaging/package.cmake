# Install rules and the Debian package (make deb: cpack -G DEB in the build tree).
# Included at the end of the top-level CMakeLists.txt. The package installs under
# /usr:
#   /usr/bin/ggml-remote-server                      the listener
#   /usr/libexec/ggml-remote/ggml-remote-worker       one per guest, started by the listener
#   /usr/lib/<multiarch>/ggml-remote/libggml-remote.so   (GGML_BACKEND_PATH; not in
#       ggml's own backends0/ folder, so ggml applications load it only when asked)
#   /usr/share/man/man1/ggml-remote-server.1.gz
#   /usr/lib/systemd/system/ggml-remote.{service,socket}, /usr/lib/sysusers.d/ggml-remote.conf
#   /usr/share/doc/ggml-remote/{README.Debian,changelog.Debian.gz,copyright}
# The systemd units name /usr/bin/ggml-remote-server: they are meant for the package.

set(GGML_REMOTE_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(GGML_REMOTE_PLUGIN_DIR lib/${CMAKE_LIBRARY_ARCHITECTURE}/ggml-remote)
else()
  set(GGML_REMOTE_PLUGIN_DIR lib/ggml-remote)
endif()

install(TARGETS ggml-remote-server RUNTIME DESTINATION bin)
# The listener finds its worker program at ../libexec/ggml-remote/ from its own
# directory (host/listener/worker_jail.h), as it finds it beside itself in a build tree.
install(TARGETS ggml-remote-worker RUNTIME DESTINATION libexec/ggml-remote)
install(TARGETS ggml-remote LIBRARY DESTINATION ${GGML_REMOTE_PLUGIN_DIR} NAMELINK_SKIP)

# The man page, compressed the way Debian wants it (gzip -9n: no name, no time stamp).
set(GGML_REMOTE_MAN_PAGE ${CMAKE_BINARY_DIR}/packaging/ggml-remote-server.1.gz)
add_custom_command(
  OUTPUT ${GGML_REMOTE_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/packaging
  COMMAND sh -c "gzip -9n < '${GGML_REMOTE_PACKAGING_DIR}/ggml-remote-server.1' > '${GGML_REMOTE_MAN_PAGE}'"
  DEPENDS ${GGML_REMOTE_PACKAGING_DIR}/ggml-remote-server.1
  COMMENT "Compressing the man page ggml-remote-server.1"
  VERBATIM)
add_custom_target(ggml-remote-man-page ALL DEPENDS ${GGML_REMOTE_MAN_PAGE})
install(FILES ${GGML_REMOTE_MAN_PAGE} DESTINATION share/man/man1)

install(FILES ${GGML_REMOTE_PACKAGING_DIR}/systemd/ggml-remote.service
              ${GGML_REMOTE_PACKAGING_DIR}/systemd/ggml-remote.socket
        DESTINATION lib/systemd/system)
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/sysusers.d/ggml-remote.conf DESTINATION lib/sysusers.d)
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/README.Debian ${GGML_REMOTE_PACKAGING_DIR}/debian/copyright
        DESTINATION share/doc/ggml-remote)

# Who answers for the package: its Maintainer: field and the changelog's trailer lines.
# The default names the project at an address that cannot exist (RFC 2606's .invalid);
# whoever distributes the package sets theirs: cmake -DGGML_REMOTE_MAINTAINER="Name <address>".
set(GGML_REMOTE_MAINTAINER "ggml-remote developers <ggml-remote@example.invalid>"
    CACHE STRING "Maintainer: field of the Debian package, \"Name <address>\"")

# debian/changelog: one entry per package version, newest first (gzip -9n, as Debian ships it).
set(GGML_REMOTE_DEB_RELEASE 1)
file(STRINGS ${GGML_REMOTE_PACKAGING_DIR}/debian/changelog GGML_REMOTE_CHANGELOG_TOP LIMIT_COUNT 1)
if(NOT GGML_REMOTE_CHANGELOG_TOP MATCHES "^ggml-remote \\(${PROJECT_VERSION}-${GGML_REMOTE_DEB_RELEASE}\\) ")
  message(WARNING "packaging/debian/changelog has no entry for ${PROJECT_VERSION}-${GGML_REMOTE_DEB_RELEASE} "
                  "at the top (it starts: ${GGML_REMOTE_CHANGELOG_TOP})")
endif()
configure_file(${GGML_REMOTE_PACKAGING_DIR}/debian/changelog ${CMAKE_BINARY_DIR}/packaging/changelog.Debian @ONLY)
set(GGML_REMOTE_CHANGELOG ${CMAKE_BINARY_DIR}/packaging/changelog.Debian.gz)
add_custom_command(
  OUTPUT ${GGML_REMOTE_CHANGELOG}
  COMMAND sh -c "gzip -9n < '${CMAKE_BINARY_DIR}/packaging/changelog.Debian' > '${GGML_REMOTE_CHANGELOG}'"
  DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog.Debian
  COMMENT "Compressing the Debian changelog"
  VERBATIM)
add_custom_target(ggml-remote-changelog ALL DEPENDS ${GGML_REMOTE_CHANGELOG})
install(FILES ${GGML_REMOTE_CHANGELOG} DESTINATION share/doc/ggml-remote)

# CPack: one binary package, ggml-remote_<version>-<release>_<arch>.deb in the build tree.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ggml-remote)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_CONTACT "${GGML_REMOTE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run ggml applications on another process's or machine's devices")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "ggml-remote forwards ggml's backend interface (devices, buffers, backend
streams) to a server that computes with the host's real ggml backends, so
that llama.cpp, whisper.cpp or any other ggml application in a container, a
sandbox, a VM or on another machine can use this machine's CPU and GPUs.

This package contains ggml-remote-server, which ggml-remote.service runs as
the user ggml-remote on the socket /run/ggml-remote/ggml-remote.sock of
ggml-remote.socket, and the guest plugin libggml-remote.so, which an
application loads with GGML_BACKEND_PATH.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${GGML_REMOTE_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${GGML_REMOTE_PACKAGING_DIR}/debian/postinst
  ${GGML_REMOTE_PACKAGING_DIR}/debian/prerm
  ${GGML_REMOTE_PACKAGING_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Depends: is worked out when cpack runs, from the built files (cpack-depends.cmake).
set(CPACK_GGML_REMOTE_ELF_FILES ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/ggml-remote-server
  ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/ggml-remote-worker
  ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/${CMAKE_SHARED_LIBRARY_PREFIX}ggml-remote${CMAKE_SHARED_LIBRARY_SUFFIX})
set(CPACK_GGML_REMOTE_SHLIBDEPS ${GGML_REMOTE_PACKAGING_DIR}/shlibdeps.sh)
set(CPACK_PROJECT_CONFIG_FILE ${GGML_REMOTE_PACKAGING_DIR}/cpack-depends.cmake)
include(CPack)
