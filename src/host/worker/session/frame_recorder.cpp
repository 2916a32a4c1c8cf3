#include "host/worker/session/frame_recorder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "host/common/server_log.h"
#include "host/common/serving_options.h"
#include "protocol/commands.h"

namespace ggml_remote::host {

namespace {

struct FileCloser {
    void operator()(std::FILE *file) const { std::fclose(file); }
};

}  // namespace

Status FrameRecorder::open(const std::string &dir, FrameRecorder *recorder) {
    const std::string session_dir = dir + "/session-" + std::to_string(::getpid());
    for (const std::string &path : {dir, session_dir}) {
        if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
            return error(Code::error, "record frames in " + path + ": " + std::strerror(errno));
        }
    }
    recorder->directory_ = session_dir;
    recorder->sequence_ = 0;
    return Status::success();
}

void FrameRecorder::record(const protocol::FrameHeader &header, protocol::ByteView payload) {
    if (!active()) return;
    char name[64];
    std::snprintf(name, sizeof(name), "/%06llu-%s.frame", static_cast<unsigned long long>(sequence_++),
                  protocol::command_name(static_cast<protocol::CommandId>(header.command)));
    const std::string path = directory_ + name;
    std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
    bool written = file != nullptr && std::fwrite(&header, sizeof(header), 1, file.get()) == 1 &&
                   (payload.size == 0 || std::fwrite(payload.data, payload.size, 1, file.get()) == 1);
    if (file != nullptr && std::fclose(file.release()) != 0) written = false;
    if (!written) {
        log_warning("recording frames: cannot write " + path + ": " + std::strerror(errno) + "; recording stops");
        directory_.clear();
    }
}

}  // namespace ggml_remote::host
