# Install rules and the Debian packages (make deb: cpack -G DEB in the build tree).
# Included at the end of the top-level CMakeLists.txt. Two install components, one
# package each:
#   plugin (ggml-remote-plugin): what a guest needs, for containers and VMs too; no
#     server, no units, nothing of systemd:
#     /usr/lib/<multiarch>/ggml-remote/libggml-remote.so   (GGML_BACKEND_PATH; not in
#         ggml's own backends0/ folder, so ggml applications load it only when asked)
#     /usr/share/doc/ggml-remote-plugin/{README.Debian,changelog.Debian.gz,copyright}
#   server (ggml-remote-server, which depends on the plugin of the same version):
#     /usr/bin/ggml-remote-server                      the listener
#     /usr/libexec/ggml-remote/ggml-remote-worker       one per guest, started by the listener
#     /usr/libexec/ggml-remote/ggml-remote-services     the store, the library, the peer broker
#     /usr/share/man/man1/ggml-remote-server.1.gz
#     /usr/lib/systemd/system/ggml-remote.{service,socket}, /usr/lib/sysusers.d/ggml-remote.conf
#     /etc/ggml-remote/server.conf (the service's flags), /etc/cdi/ggml-remote.yaml (a CDI
#         device that gives a container the socket and the plugin); both conffiles
#     /usr/share/doc/ggml-remote-server/{README.Debian,changelog.Debian.gz,copyright}
# The systemd units name /usr/bin/ggml-remote-server: they are meant for the package.

set(GGML_REMOTE_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(GGML_REMOTE_PLUGIN_DIR lib/${CMAKE_LIBRARY_ARCHITECTURE}/ggml-remote)
else()
  set(GGML_REMOTE_PLUGIN_DIR lib/ggml-remote)
endif()

install(TARGETS ggml-remote-server RUNTIME DESTINATION bin COMPONENT server)
# The listener finds its worker program at ../libexec/ggml-remote/ from its own
# directory (host/listener/worker_jail.h), as it finds it beside itself in a build tree.
install(TARGETS ggml-remote-worker ggml-remote-services RUNTIME DESTINATION libexec/ggml-remote COMPONENT server)
install(TARGETS ggml-remote LIBRARY DESTINATION ${GGML_REMOTE_PLUGIN_DIR} COMPONENT plugin NAMELINK_SKIP)

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
install(FILES ${GGML_REMOTE_MAN_PAGE} DESTINATION share/man/man1 COMPONENT server)

install(FILES ${GGML_REMOTE_PACKAGING_DIR}/systemd/ggml-remote.service
              ${GGML_REMOTE_PACKAGING_DIR}/systemd/ggml-remote.socket
        DESTINATION lib/systemd/system COMPONENT server)
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/sysusers.d/ggml-remote.conf DESTINATION lib/sysusers.d COMPONENT server)
# Under /etc, whatever the prefix; the server package's conffiles (debian/server/conffiles).
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/server.conf DESTINATION /etc/ggml-remote COMPONENT server)
# The CDI spec names the plugin's multiarch path, filled in here.
configure_file(${GGML_REMOTE_PACKAGING_DIR}/cdi/ggml-remote.yaml.in ${CMAKE_BINARY_DIR}/packaging/ggml-remote.yaml @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/ggml-remote.yaml DESTINATION /etc/cdi COMPONENT server)
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/README.Debian ${GGML_REMOTE_PACKAGING_DIR}/debian/copyright
        DESTINATION share/doc/ggml-remote-server COMPONENT server)
install(FILES ${GGML_REMOTE_PACKAGING_DIR}/debian/plugin/README.Debian ${GGML_REMOTE_PACKAGING_DIR}/debian/copyright
        DESTINATION share/doc/ggml-remote-plugin COMPONENT plugin)

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
install(FILES ${GGML_REMOTE_CHANGELOG} DESTINATION share/doc/ggml-remote-plugin COMPONENT plugin)
install(FILES ${GGML_REMOTE_CHANGELOG} DESTINATION share/doc/ggml-remote-server COMPONENT server)

# CPack: one package per component, <name>_<version>-<release>_<arch>.deb in the build tree.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ggml-remote)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_CONTACT "${GGML_REMOTE_MAINTAINER}")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL plugin server)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${GGML_REMOTE_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Depends: from dpkg-shlibdeps (dpkg-dev; `make deb` installs it in the build root,
# cpack-depends.cmake stops cpack without it), plus what symbols cannot say, below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PROJECT_CONFIG_FILE ${GGML_REMOTE_PACKAGING_DIR}/cpack-depends.cmake)
# The plugin implements ggml's backend interface and relies on 0.27's private layouts
# (struct ggml_backend_device and friends, which carry no symbol version): another
# ggml minor release may change them without a new soname.
set(GGML_REMOTE_GGML_DEPENDS "libggml0 (>= 0.27.0), libggml0 (<< 0.28~)")
set(GGML_REMOTE_DEB_VERSION ${PROJECT_VERSION}-${GGML_REMOTE_DEB_RELEASE})
set(GGML_REMOTE_DESCRIPTION_TAIL
  "ggml-remote forwards ggml's backend interface (devices, buffers, backend
streams) to a server that computes with the host's real ggml backends, so
that llama.cpp, whisper.cpp or any other ggml application in a container, a
sandbox, a VM or on another machine can use this machine's CPU and GPUs.")

# The guest plugin alone: what a container or VM image installs.
set(CPACK_DEBIAN_PLUGIN_PACKAGE_NAME ggml-remote-plugin)
set(CPACK_COMPONENT_PLUGIN_DESCRIPTION
  "ggml backend plugin that uses a ggml-remote server's devices
${GGML_REMOTE_DESCRIPTION_TAIL}

This package contains the guest plugin libggml-remote.so, which a ggml
application loads with GGML_BACKEND_PATH, and nothing of the server: it is
what a container or VM image installs.")
set(CPACK_DEBIAN_PLUGIN_PACKAGE_DEPENDS "${GGML_REMOTE_GGML_DEPENDS}")
set(CPACK_DEBIAN_PLUGIN_PACKAGE_SECTION libs)

# The server: units, system user, conffiles, maintainer scripts (debian/server/).
set(CPACK_DEBIAN_SERVER_PACKAGE_NAME ggml-remote-server)
set(CPACK_COMPONENT_SERVER_DESCRIPTION
  "server that lends this machine's ggml devices to ggml-remote guests
${GGML_REMOTE_DESCRIPTION_TAIL}

This package contains ggml-remote-server, which ggml-remote.service runs as
the user ggml-remote on the socket /run/ggml-remote/ggml-remote.sock of
ggml-remote.socket with the settings of /etc/ggml-remote/server.conf, and a
CDI device (ggml-remote/server=socket) that gives containers the socket and
the plugin.")
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS
  "ggml-remote-plugin (= ${GGML_REMOTE_DEB_VERSION}), ${GGML_REMOTE_GGML_DEPENDS}, systemd | systemd-standalone-sysusers | systemd-sysusers")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
  ${GGML_REMOTE_PACKAGING_DIR}/debian/server/conffiles
  ${GGML_REMOTE_PACKAGING_DIR}/debian/server/postinst
  ${GGML_REMOTE_PACKAGING_DIR}/debian/server/prerm
  ${GGML_REMOTE_PACKAGING_DIR}/debian/server/postrm)

# Both take over files of the single package ggml-remote of before, which had this
# same version: any version of it.
foreach(component PLUGIN SERVER)
  set(CPACK_DEBIAN_${component}_PACKAGE_BREAKS ggml-remote)
  set(CPACK_DEBIAN_${component}_PACKAGE_REPLACES ggml-remote)
endforeach()
include(CPack)
