#include "host/worker/session/frame_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/common/server_log.h"
#include "host/common/serving_options.h"
#include "protocol/commands.h"

namespace ggml_remote::host {

namespace {

bool write_fully(int fd, const void *data, size_t size) {
    const auto *bytes = static_cast<const uint8_t *>(data);
    while (size > 0) {
        const ssize_t wrote = ::write(fd, bytes, size);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) return false;
        bytes += wrote;
        size -= static_cast<size_t>(wrote);
    }
    return true;
}

}  // namespace

Status FrameRecorder::open(const std::string &dir, FrameRecorder *recorder) {
    const std::string session_dir = dir + "/session-" + std::to_string(::getpid());
    for (const std::string &path : {dir, session_dir}) {
        if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
            return error(Code::error, "record frames in " + path + ": " + std::strerror(errno));
        }
    }
    // Frames are written beneath this descriptor: a link put in the session
    // directory's place, or in a frame's, is never followed.
    recorder->directory_fd_.reset(::open(session_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!recorder->directory_fd_.valid()) {
        return error(Code::error, "record frames in " + session_dir + ": " + std::strerror(errno));
    }
    recorder->directory_ = session_dir;
    recorder->sequence_ = 0;
    return Status::success();
}

void FrameRecorder::record(const protocol::FrameHeader &header, protocol::ByteView payload) {
    if (!active()) return;
    char name[64];
    std::snprintf(name, sizeof(name), "%06llu-%s.frame", static_cast<unsigned long long>(sequence_++),
                  protocol::command_name(static_cast<protocol::CommandId>(header.command)));
    const std::string path = directory_ + "/" + name;
    UniqueFd file(::openat(directory_fd_.get(), name,
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600));
    const bool written = file.valid() && write_fully(file.get(), &header, sizeof(header)) &&
                         write_fully(file.get(), payload.data, payload.size);
    if (!written) {
        log_warning("recording frames: cannot write " + path + ": " + std::strerror(errno) + "; recording stops");
        directory_.clear();
        directory_fd_.reset();
    }
}

}  // namespace ggml_remote::host
