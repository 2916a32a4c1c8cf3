#include "host/services/model_library.h"

#include <dirent.h>
#include <fcntl.h>
#include <gguf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "host/common/server_log.h"
#include "protocol/commands.h"
#include "transport/regular_file.h"

namespace ggml_remote::host {

using protocol::ContentDigest;

namespace {

constexpr const char *kSuffix = ".gguf";

Status failure(const std::string &what) { return error(Code::error, "models: " + what + ": " + std::strerror(errno)); }

// `size` bytes at `offset` of `fd`, all of them.
bool read_exactly(int fd, uint8_t *to, size_t size, uint64_t offset) {
    for (size_t done = 0; done < size;) {
        const ssize_t got = ::pread(fd, to + done, size - done, static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        done += static_cast<size_t>(got);
    }
    return true;
}

bool is_gguf_name(const std::string &name) {
    const size_t suffix = std::strlen(kSuffix);
    return name.size() > suffix && name[0] != '.' && name.compare(name.size() - suffix, suffix, kSuffix) == 0;
}

std::string mebibytes(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / double(1 << 20));
    return text;
}

// A GGUF file's tensors: their offsets in the file (the data section's and their
// own) and sizes, from ggml's parser; it reads the header only (no_alloc).
struct GgufTensors {
    struct Placed {
        uint64_t offset = 0;
        uint64_t size = 0;
    };
    std::vector<Placed> tensors;

    Status read(int fd) {
        std::unique_ptr<FILE, int (*)(FILE *)> stream(::fdopen(::dup(fd), "rb"), &std::fclose);
        if (!stream) return failure("fdopen");
        gguf_init_params params{};
        params.no_alloc = true;
        params.ctx = nullptr;
        std::unique_ptr<gguf_context, void (*)(gguf_context *)> gguf(gguf_init_from_file_ptr(stream.get(), params),
                                                                     &gguf_free);
        if (!gguf) return error(Code::bad_request, "not a GGUF file ggml can read");
        const uint64_t data = gguf_get_data_offset(gguf.get());
        for (int64_t i = 0; i < gguf_get_n_tensors(gguf.get()); ++i) {
            const uint64_t offset = gguf_get_tensor_offset(gguf.get(), i);
            if (offset > UINT64_MAX - data) return error(Code::bad_request, "a tensor's offset overflows");
            tensors.push_back({data + offset, gguf_get_tensor_size(gguf.get(), i)});
        }
        return Status::success();
    }
};

// Whether [offset, +size) lies inside a file of `file_size` bytes.
bool holds(uint64_t file_size, uint64_t offset, uint64_t size) {
    return offset <= file_size && size <= file_size - offset;
}

}  // namespace

bool ModelLibrary::Identity::operator==(const Identity &other) const {
    return device == other.device && inode == other.inode && size == other.size &&
           modified.tv_sec == other.modified.tv_sec && modified.tv_nsec == other.modified.tv_nsec;
}

namespace {

ModelLibrary::Identity identity_of(const struct stat &st) {
    ModelLibrary::Identity identity;
    identity.device = st.st_dev;
    identity.inode = st.st_ino;
    identity.size = st.st_size;
    identity.modified = st.st_mtim;
    return identity;
}

}  // namespace

ModelLibrary::~ModelLibrary() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    queued_changed_.notify_all();
    if (indexer_.joinable()) indexer_.join();
}

Status ModelLibrary::open(const std::string &directory) {
    directory_ = directory;
    directory_fd_.reset(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return directory_fd_.valid() ? Status::success() : failure("open " + directory);
}

void ModelLibrary::start_indexing() { indexer_ = std::thread(&ModelLibrary::run, this); }

void ModelLibrary::index_now() {
    queue_directory();
    std::string name;
    while (take_queued(false, &name)) (void)index_file(name);
}

void ModelLibrary::run() {
    const auto started = std::chrono::steady_clock::now();
    queue_directory();
    std::string name;
    while (take_queued(false, &name)) {
        if (Status s = index_file(name); !s) log_warning("models: " + name + ": not served: " + s.message());
    }
    const ModelLibraryFigures figures = this->figures();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char took[32];
    std::snprintf(took, sizeof(took), "%.2f s", seconds);
    log_line("models: " + directory_ + ": " + std::to_string(figures.files) +
             (figures.files == 1 ? " file, " : " files, ") + std::to_string(figures.tensors) + " tensors, " +
             mebibytes(figures.bytes) + " indexed in " + took);
    // Then the files found changed, as finds come across them.
    while (take_queued(true, &name)) {
        Status s = index_file(name);
        log_line("models: " + name +
                 " changed since it was indexed: " + (s ? std::string("indexed again") : "not served: " + s.message()));
    }
}

void ModelLibrary::queue_directory() {
    const int listing = ::openat(directory_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = listing >= 0 ? ::fdopendir(listing) : nullptr;
    if (dir == nullptr) {
        if (listing >= 0) ::close(listing);
        log_error(failure("list " + directory_).message());
        return;
    }
    std::vector<std::string> names;
    while (const dirent *entry = ::readdir(dir)) {
        if (is_gguf_name(entry->d_name)) names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
    std::lock_guard<std::mutex> lock(mutex_);
    queued_.insert(queued_.end(), names.begin(), names.end());
}

bool ModelLibrary::take_queued(bool wait, std::string *name) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wait) queued_changed_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_ || queued_.empty()) return false;
    *name = std::move(queued_.front());
    queued_.pop_front();
    return true;
}

Status ModelLibrary::index_file(const std::string &name) {
    // Never a link (it could lead out of DIR), a FIFO (it would hang the
    // indexer) or anything else but a regular file.
    UniqueFd fd;
    struct stat st{};
    if (Status s = open_regular_file(directory_fd_.get(), name, {}, &fd, &st); !s) {
        // Its errors start with the name, which the log line gives already.
        return error(s.code(), s.message().substr(std::min(s.message().size(), name.size() + 2)));
    }
    IndexedFile file;
    file.identity = identity_of(st);
    GgufTensors layout;
    if (Status s = layout.read(fd.get()); !s) return s;
    std::vector<Tensor> tensors;
    std::vector<uint8_t> block;
    for (const GgufTensors::Placed &placed : layout.tensors) {
        // Smaller ones a guest never names by digest (session_buffers.cpp refuses them).
        if (placed.size < protocol::kMinWeightLookupBytes) continue;
        if (!holds(static_cast<uint64_t>(st.st_size), placed.offset, placed.size)) {
            return error(Code::bad_request, "a tensor lies past the end");
        }
        ContentDigest digest;
        if (Status s = digest_of_range(fd.get(), placed.offset, placed.size, &block, &digest); !s) return s;
        tensors.push_back({digest, {name, placed.offset, placed.size}});
        file.bytes += placed.size;
    }
    file.tensors = tensors.size();
    std::lock_guard<std::mutex> lock(mutex_);
    forget_file_locked(name);
    files_[name] = file;
    for (Tensor &tensor : tensors) tensors_.emplace(tensor.digest, std::move(tensor.location));
    return Status::success();
}

Status ModelLibrary::digest_of_range(int fd, uint64_t offset, uint64_t size, std::vector<uint8_t> *block,
                                     ContentDigest *digest) {
    // Read, never mapped: a file cut short while it is hashed is an error here,
    // where a mapping's page past the new end would kill the listener (SIGBUS).
    protocol::ContentDigestBlocks blocks;
    block->resize(static_cast<size_t>(std::min<uint64_t>(size, protocol::kDigestBlockSize)));
    for (uint64_t done = 0; done < size;) {
        if (stopping()) return error(Code::error, "the server stops");
        const size_t length = static_cast<size_t>(std::min<uint64_t>(size - done, protocol::kDigestBlockSize));
        if (!read_exactly(fd, block->data(), length, offset + done)) {
            return error(Code::bad_request, "it was cut short while it was indexed (replace files by rename)");
        }
        blocks.add(block->data(), length);
        done += length;
    }
    *digest = blocks.finish();
    return Status::success();
}

bool ModelLibrary::stopping() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stopping_;
}

void ModelLibrary::forget_file_locked(const std::string &name) {
    if (files_.erase(name) == 0) return;
    for (auto it = tensors_.begin(); it != tensors_.end();) {
        it = it->second.file == name ? tensors_.erase(it) : std::next(it);
    }
}

bool ModelLibrary::open_unchanged(const Location &location, UniqueFd *file) {
    const auto indexed = files_.find(location.file);
    if (indexed == files_.end()) return false;
    UniqueFd fd;
    struct stat st{};
    if (!open_regular_file(directory_fd_.get(), location.file, {}, &fd, &st) ||
        !(identity_of(st) == indexed->second.identity)) {
        return false;
    }
    *file = std::move(fd);
    return true;
}

bool ModelLibrary::find(const ContentDigest &digest, uint64_t size, UniqueFd *file, uint64_t *offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (true) {
        const auto range = tensors_.equal_range(digest);
        auto it = range.first;
        while (it != range.second && it->second.size != size) ++it;
        if (it == range.second) return false;
        const Location location = it->second;
        if (open_unchanged(location, file)) {
            *offset = location.offset;
            return true;
        }
        // Replaced, edited or removed: none of its tensors is served until it is
        // indexed again (on the indexing thread, or the next index_now).
        forget_file_locked(location.file);
        queued_.push_back(location.file);
        queued_changed_.notify_all();
    }
}

ModelLibraryFigures ModelLibrary::figures() const {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelLibraryFigures figures;
    for (const auto &[name, file] : files_) {
        ++figures.files;
        figures.tensors += file.tensors;
        figures.bytes += file.bytes;
    }
    return figures;
}

}  // namespace ggml_remote::host
