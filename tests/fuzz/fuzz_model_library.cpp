// Fuzz target: the model library (--models DIR, host/services/model_library.h)
// indexing a directory of fuzzed GGUF-ish files, and answering the finds workers
// send the store's owner (store_channel.h; --models alone: no store). The input
// builds up to four files (version, tensor count, alignment, tensor sizes, types,
// offsets and bytes; patched bytes, a cut), each in a place of its own: a GGUF
// file at DIR's top level, a hidden one, one with another suffix, one in a
// subdirectory (named like a GGUF file), a symbolic link to a file outside DIR, a
// FIFO; then a script of changes (a file replaced by rename, grown, cut, removed),
// indexing again, and finds, direct or over a worker's channel (with commits,
// waiters and unknown requests, all refused or empty). A fresh library per input.
//
// Oracles:
// - whatever it serves is `size` bytes whose digest is the one asked, inside a
//   regular file that a GGUF name at DIR's top level names now, of at least
//   kMinWeightLookupBytes, through a read-only descriptor; never a hidden file,
//   another suffix, a file in a subdirectory, a file a symbolic link leads to (out
//   of DIR), a FIFO, or a file removed or changed since it was indexed;
// - once indexed, every tensor (of kMinWeightLookupBytes or more) of every GGUF file
//   ggml reads whole is served;
// - a derived find, a commit, waiters and unknown requests are never answered from
//   the library;
// - indexing never hangs (a FIFO named like a model) and never crashes.
#include <fcntl.h>
#include <ggml.h>
#include <gguf.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.h"
#include "host/common/store_channel.h"
#include "host/services/model_library.h"
#include "host/services/store_owner.h"
#include "protocol/commands.h"
#include "protocol/content_digest.h"

namespace ggml_remote::fuzz {
namespace {

namespace store_channel = host::store_channel;
using protocol::ContentDigest;
using protocol::kMinWeightLookupBytes;

constexpr int kFiles = 4;
constexpr int kMaxTensors = 3;
constexpr int kAnswerMs = 3000;

// Where a file lies, and what DIR's top level shows of it.
enum class Place { top, hidden, other_suffix, subdirectory, link_outside, fifo, count };

Place place_of(uint8_t byte) {
    const uint8_t choice = byte % 10;
    return choice < 5 ? Place::top : static_cast<Place>(choice - 4);
}

// A tensor as the builder laid it out: where its bytes are meant to be in the file.
struct BuiltTensor {
    uint64_t offset = 0, size = 0;  // in the file
    ContentDigest digest;           // of the bytes meant for it
};

// A GGUF file the builder made, and whether ggml reads it whole (known only when
// no byte was patched; a cut file is read, but a tensor past its end is not served).
struct BuiltFile {
    std::vector<uint8_t> bytes;
    std::vector<BuiltTensor> tensors;
    bool sound = false;
};

class GgufWriter {
  public:
    void u32(uint32_t value) { pod(value); }
    void u64(uint64_t value) { pod(value); }
    void text(const std::string &value) {
        u64(value.size());
        bytes.insert(bytes.end(), value.begin(), value.end());
    }
    void pad(uint64_t alignment) {
        if (alignment != 0) bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0);
    }
    std::vector<uint8_t> bytes;

  private:
    template <class T>
    void pod(T value) {
        const auto *raw = reinterpret_cast<const uint8_t *>(&value);
        bytes.insert(bytes.end(), raw, raw + sizeof(value));
    }
};

uint64_t alignment_of(uint8_t byte, bool *stated) {
    static const uint64_t kAlignments[] = {32, 64, 4096, 1, 0, 3, 48, 32};
    *stated = byte % 8 != 7 && byte % 8 != 0;
    return kAlignments[byte % 8];
}

BuiltFile build_file(InputScript &script) {
    BuiltFile file;
    bool sound = true;
    const uint8_t shape = script.next<uint8_t>();
    bool stated = false;
    const uint64_t alignment = alignment_of(script.next<uint8_t>(), &stated);
    const bool usable_alignment = alignment != 0 && (alignment & (alignment - 1)) == 0;
    sound = sound && usable_alignment;
    const uint8_t version = shape % 16 == 15 ? script.next<uint8_t>() : 3;
    sound = sound && version == 3;
    const int count = 1 + (shape / 16) % kMaxTensors;
    const bool lies_about_count = shape >= 240;
    sound = sound && !lies_about_count;

    struct Planned {
        uint64_t size;
        ggml_type type;
        uint8_t seed;
        uint8_t offset_lie;
    };
    std::vector<Planned> planned;
    for (int i = 0; i < count; ++i) {
        const uint8_t size = script.next<uint8_t>();
        Planned tensor{};
        // Mostly big enough for a guest to name; sometimes not.
        tensor.size = size < 32 ? 1000 + size * 61 : kMinWeightLookupBytes + (size - 32) * 37;
        tensor.type = (size & 1) != 0 ? GGML_TYPE_F32 : GGML_TYPE_I8;
        if (tensor.type == GGML_TYPE_F32) tensor.size = tensor.size / 4 * 4;
        tensor.seed = script.next<uint8_t>();
        tensor.offset_lie = script.next<uint8_t>();
        planned.push_back(tensor);
    }

    GgufWriter header;
    header.bytes.insert(header.bytes.end(), {'G', 'G', 'U', 'F'});
    header.u32(version);
    header.u64(lies_about_count ? UINT64_MAX - shape : static_cast<uint64_t>(count));
    header.u64(stated ? 2 : 1);
    header.text("general.name");
    header.u32(GGUF_TYPE_STRING);
    header.text("a fuzzed model");
    if (stated) {
        header.text(GGUF_KEY_GENERAL_ALIGNMENT);
        header.u32(GGUF_TYPE_UINT32);
        header.u32(static_cast<uint32_t>(alignment));
    }
    const uint64_t padding = usable_alignment ? alignment : 32;
    uint64_t data_size = 0;
    std::vector<uint64_t> offsets;
    for (int i = 0; i < count; ++i) {
        header.text("t" + std::to_string(i));
        header.u32(1);
        const uint64_t elements = planned[i].type == GGML_TYPE_F32 ? planned[i].size / 4 : planned[i].size;
        header.u64(elements);
        header.u32(planned[i].type);
        uint64_t offset = data_size;
        const uint8_t lie = planned[i].offset_lie;
        if (lie % 8 == 7) offset += 1 + lie / 8;             // not where the last ended
        if (lie % 8 == 6 && i > 0) offset = offsets.back();  // over the last
        if (lie % 8 == 5) offset = UINT64_MAX - lie;         // past anything
        sound = sound && lie % 8 < 5;
        header.u64(offset);
        offsets.push_back(offset);
        data_size += (planned[i].size + padding - 1) / padding * padding;
    }
    header.pad(padding);
    const uint64_t data = header.bytes.size();
    file.bytes = std::move(header.bytes);
    file.bytes.resize(data + data_size, 0);
    uint64_t at = data;
    for (int i = 0; i < count; ++i) {
        // A 4 KiB pattern of the seed's, then a counter every 4 KiB: tensors of
        // different seeds or sizes differ.
        uint8_t *bytes = file.bytes.data() + at;
        for (uint64_t b = 0; b < std::min<uint64_t>(planned[i].size, 4096); ++b) {
            bytes[b] = static_cast<uint8_t>(planned[i].seed * 7 + (b >> 3) * 13 + (b & 7));
        }
        for (uint64_t b = 4096; b < planned[i].size; b += 4096) {
            std::memcpy(bytes + b, bytes, std::min<uint64_t>(planned[i].size - b, 4096));
            bytes[b] = static_cast<uint8_t>(b >> 12);
        }
        BuiltTensor tensor;
        tensor.offset = at;
        tensor.size = planned[i].size;
        tensor.digest = protocol::content_digest(file.bytes.data() + at, planned[i].size);
        file.tensors.push_back(tensor);
        at += (planned[i].size + padding - 1) / padding * padding;
    }

    // Patches and a cut, sometimes.
    const uint8_t damage = script.next<uint8_t>();
    for (int i = 0; i < damage % 4; ++i) {
        const uint16_t where = script.next<uint16_t>();
        const uint64_t limit = damage & 0x80 ? file.bytes.size() : data;
        file.bytes[where % limit] ^= static_cast<uint8_t>(1 + script.next<uint8_t>() % 255);
        sound = false;
    }
    if ((damage & 0x70) == 0x70) {
        file.bytes.resize(file.bytes.size() * script.next<uint8_t>() / 256);
        sound = false;
    }
    file.sound = sound;
    return file;
}

// A file of the input: where it is, what it holds now.
struct FileModel {
    Place place = Place::top;
    std::string path;  // as written (the link's target for link_outside)
    BuiltFile built;
    bool present = false;
};

struct Found {
    bool found = false;
    UniqueFd file;
    uint64_t offset = 0;
};

class Harness {
  public:
    explicit Harness(InputScript &script);
    ~Harness();
    void step(InputScript &script);
    void finish() { check_everything(); }

  private:
    std::string models() const { return root_ + "/models"; }
    void write_file(int index, BuiltFile built);
    Found find_direct(const ContentDigest &digest, uint64_t size);
    Found find_over_channel(const ContentDigest &digest, uint64_t size, uint32_t flags);
    void check_found(const Found &found, const ContentDigest &digest, uint64_t size);
    void check_everything();
    void check_complete();
    void other_request(InputScript &script);
    void change(int index, InputScript &script, uint8_t how);

    std::string root_;
    host::StoreOwner owner_;
    host::ModelLibrary *library_ = nullptr;  // the owner's
    UniqueFd channel_;
    FileModel files_[kFiles];
    std::vector<std::pair<ContentDigest, uint64_t>> asked_;  // every digest and size the script may name
    bool indexed_ = false;                                   // since the last change, index_now ran
};

// Writes `bytes` with a modification time no other write had: an operator's files
// are changed seconds apart, while here a freed inode number may come back for a
// file of the same size within one tick of the file system's clock (which the
// library would take for the file it indexed; see tests/fuzz/README.md).
bool write_all(const std::string &path, const std::vector<uint8_t> &bytes) {
    static time_t writes = 0;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    const timespec times[2] = {{0, UTIME_OMIT}, {1700000000 + ++writes, 0}};
    return fd.valid() && ::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) &&
           ::futimens(fd.get(), times) == 0;
}

Harness::Harness(InputScript &script) {
    char pattern[] = "/dev/shm/ggml-remote-fuzz-models-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) oracle_violated("cannot make a directory");
    root_ = pattern;
    std::filesystem::create_directories(models());
    std::filesystem::create_directories(root_ + "/outside");
    const int count = 1 + script.next<uint8_t>() % kFiles;
    for (int i = 0; i < count; ++i) {
        files_[i].place = place_of(script.next<uint8_t>());
        write_file(i, build_file(script));
    }
    auto library = std::make_unique<host::ModelLibrary>();
    if (!library->open(models()).ok()) oracle_violated("the library cannot open its directory");
    library_ = library.get();
    library_->index_now();
    indexed_ = true;
    owner_.use_library(std::move(library));
    if (!owner_.connect("a tenant", &channel_).ok()) oracle_violated("the store gives no channel");
}

Harness::~Harness() {
    channel_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
}

void Harness::write_file(int index, BuiltFile built) {
    FileModel &file = files_[index];
    const std::string name = "m" + std::to_string(index) + ".gguf";
    bool written = true;
    switch (file.place) {
        case Place::top:
            file.path = models() + "/" + name;
            break;
        case Place::hidden:
            file.path = models() + "/." + name;
            break;
        case Place::other_suffix:
            file.path = models() + "/" + name + ".part";
            break;
        case Place::subdirectory:
            std::filesystem::create_directories(models() + "/d" + name);  // a directory named like a model
            file.path = models() + "/d" + name + "/" + name;
            break;
        case Place::link_outside:
            file.path = root_ + "/outside/" + name;
            if (struct stat st{}; ::lstat((models() + "/" + name).c_str(), &st) != 0) {
                written = ::symlink(("../outside/" + name).c_str(), (models() + "/" + name).c_str()) == 0;
            }
            break;
        case Place::fifo:
            file.path = models() + "/" + name;
            if (!file.present) written = ::mkfifo(file.path.c_str(), 0644) == 0;
            file.present = true;
            return;
        case Place::count:
            break;
    }
    // Replaced by rename, as the operator must: a new file beside the old one.
    const std::string beside = file.path + ".new";
    written = written && write_all(beside, built.bytes) && ::rename(beside.c_str(), file.path.c_str()) == 0;
    if (!written) oracle_violated("cannot write a model file");
    for (const BuiltTensor &tensor : built.tensors) {
        asked_.emplace_back(tensor.digest, tensor.size);
        if (tensor.offset + tensor.size <= built.bytes.size()) {
            asked_.emplace_back(protocol::content_digest(built.bytes.data() + tensor.offset, tensor.size), tensor.size);
        }
    }
    file.built = std::move(built);
    file.present = true;
}

Found Harness::find_direct(const ContentDigest &digest, uint64_t size) {
    Found found;
    found.found = library_->find(digest, size, &found.file, &found.offset);
    if (found.found != found.file.valid()) oracle_violated("a find's descriptor, or none, lies");
    return found;
}

Found Harness::find_over_channel(const ContentDigest &digest, uint64_t size, uint32_t flags) {
    store_channel::Request request;
    request.kind = static_cast<uint32_t>(store_channel::Kind::find);
    std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
    request.size = size;
    request.flags = flags;
    if (!store_channel::send_message(channel_.get(), &request, sizeof(request), nullptr, 0)) {
        oracle_violated("the store's channel is gone");
    }
    store_channel::Reply reply;
    std::vector<UniqueFd> fds;
    if (!store_channel::receive_message(channel_.get(), &reply, sizeof(reply), &fds, 2, kAnswerMs)) {
        oracle_violated("no reply in time");
    }
    if (reply.code != 0 || fds.size() > 1) oracle_violated("a find failed, or came with descriptors");
    Found found;
    found.found = reply.found == store_channel::kFound;
    found.offset = reply.content_offset;
    if (!fds.empty()) found.file = std::move(fds.front());
    if (found.found != found.file.valid()) oracle_violated("a find's descriptor, or none, lies");
    if (reply.found != store_channel::kFound && reply.found != store_channel::kNotFound) {
        oracle_violated("a library find in flight");
    }
    if (found.found && (flags & store_channel::kDerived) != 0) oracle_violated("a derived find from the library");
    return found;
}

// A regular file that a GGUF name at DIR's top level names now (itself, not a link).
bool named_at_top_level(const std::string &directory, const struct stat &served) {
    for (const auto &entry : std::filesystem::directory_iterator(directory)) {
        const std::string name = entry.path().filename();
        if (name.empty() || name[0] == '.' || name.size() <= 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) {
            continue;
        }
        struct stat st{};
        if (::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == served.st_dev &&
            st.st_ino == served.st_ino) {
            return true;
        }
    }
    return false;
}

void Harness::check_found(const Found &found, const ContentDigest &digest, uint64_t size) {
    if (!found.found) return;
    if (size < kMinWeightLookupBytes) oracle_violated("a tensor too small to name was served");
    const int mode = ::fcntl(found.file.get(), F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) != O_RDONLY) oracle_violated("a model file served writable");
    struct stat st{};
    if (::fstat(found.file.get(), &st) != 0 || !S_ISREG(st.st_mode)) oracle_violated("served no regular file");
    if (!named_at_top_level(models(), st)) oracle_violated("served a file no GGUF name at DIR's top level names");
    if (found.offset > uint64_t(st.st_size) || size > uint64_t(st.st_size) - found.offset) {
        oracle_violated("served bytes past a file's end");
    }
    std::vector<uint8_t> bytes(size);
    if (::pread(found.file.get(), bytes.data(), size, static_cast<off_t>(found.offset)) != static_cast<ssize_t>(size)) {
        oracle_violated("served bytes that cannot be read");
    }
    if (protocol::content_digest(bytes.data(), bytes.size()) != digest) oracle_violated("served other bytes");
}

void Harness::check_everything() {
    for (const auto &[digest, size] : asked_) {
        check_found(find_direct(digest, size), digest, size);
        Found other_size = find_direct(digest, size + 1);
        if (other_size.found) check_found(other_size, digest, size + 1);
    }
    if (indexed_) check_complete();
}

// Every tensor a guest may name, of every file ggml reads whole at the top level.
void Harness::check_complete() {
    for (const FileModel &file : files_) {
        if (!file.present || !file.built.sound || file.place != Place::top) {
            continue;
        }
        for (const BuiltTensor &tensor : file.built.tensors) {
            if (tensor.size < kMinWeightLookupBytes) continue;
            const Found found = find_direct(tensor.digest, tensor.size);
            if (!found.found) oracle_violated("a tensor of a sound GGUF file was not served");
            check_found(found, tensor.digest, tensor.size);
        }
    }
}

void Harness::step(InputScript &script) {
    const uint8_t op = script.next<uint8_t>();
    const int index = (op / 8) % kFiles;
    switch (op % 8) {
        case 0:
        case 1:
            change(index, script, op % 8 == 0 ? 0 : script.next<uint8_t>());
            indexed_ = false;
            break;
        case 2:
            library_->index_now();
            indexed_ = true;
            break;
        case 3:
        case 4: {
            if (asked_.empty()) break;
            const auto &[digest, size] = asked_[script.next<uint8_t>() % asked_.size()];
            const uint8_t flags = script.next<uint8_t>();
            const Found found = find_over_channel(digest, size, flags % 4);
            check_found(found, digest, size);
            break;
        }
        case 5:
        case 6:
            other_request(script);
            break;
        default:
            check_everything();
    }
}

// How a file changes: replaced by rename, grown, cut, removed.
void Harness::change(int index, InputScript &script, uint8_t how) {
    FileModel &file = files_[index];
    if (file.place == Place::fifo) return;
    if (how % 4 == 0 || !file.present) return write_file(index, build_file(script));
    if (how % 4 == 3) {
        (void)::unlink(file.path.c_str());
        file.present = false;
        return;
    }
    std::vector<uint8_t> bytes = file.built.bytes;
    if (how % 4 == 1) {
        bytes.insert(bytes.end(), 1 + how / 4, how);
    } else {
        bytes.resize(bytes.size() * script.next<uint8_t>() / 256);
        for (const BuiltTensor &tensor : file.built.tensors) {
            // A tensor cut short: the file is not served (ggml still reads its header).
            if (tensor.size >= kMinWeightLookupBytes && tensor.offset + tensor.size > bytes.size()) {
                file.built.sound = false;
            }
        }
        if (bytes.size() < 32) file.built.sound = false;
    }
    // In place (O_TRUNC and write): a new size, so a new identity.
    if (!write_all(file.path, bytes)) oracle_violated("cannot change a model file");
    file.built.bytes = std::move(bytes);
}

void Harness::other_request(InputScript &script) {
    store_channel::Request request;
    const uint8_t kind = script.next<uint8_t>();
    request.kind = kind % 4 == 0   ? static_cast<uint32_t>(store_channel::Kind::commit)
                   : kind % 4 == 1 ? static_cast<uint32_t>(store_channel::Kind::waiters)
                   : kind % 4 == 2 ? static_cast<uint32_t>(store_channel::Kind::identify)
                                   : 5u + kind;
    if (!asked_.empty()) {
        const auto &[digest, size] = asked_[kind % asked_.size()];
        std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
        request.size = size;
    }
    int data[2], result[2];
    if (::pipe2(data, O_CLOEXEC) != 0 || ::pipe2(result, O_CLOEXEC) != 0) oracle_violated("pipe");
    UniqueFd ends[4] = {UniqueFd(data[0]), UniqueFd(data[1]), UniqueFd(result[0]), UniqueFd(result[1])};
    const int sent[2] = {data[0], result[1]};
    if (!store_channel::send_message(channel_.get(), &request, sizeof(request), sent, 2)) {
        oracle_violated("the store's channel is gone");
    }
    store_channel::Reply reply;
    std::vector<UniqueFd> fds;
    if (!store_channel::receive_message(channel_.get(), &reply, sizeof(reply), &fds, 2, kAnswerMs)) {
        oracle_violated("no reply in time");
    }
    const bool waiters = kind % 4 == 1;
    if (!fds.empty() || reply.found != 0 || (reply.code == 0) != waiters) {
        oracle_violated("a commit, identify or unknown request was answered (or waiters counted)");
    }
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote::fuzz;
    static const bool quiet = [] {
        ggml_log_set([](ggml_log_level, const char *, void *) {}, nullptr);  // gguf's complaints
        return true;
    }();
    (void)quiet;
    ggml_remote::host::store_channel::NoSigpipe no_sigpipe;
    InputScript script{data, size};
    Harness harness(script);
    while (!script.done()) harness.step(script);
    harness.finish();
    return 0;
}
