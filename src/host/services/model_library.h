// ModelLibrary: the operator's published models (--models DIR), by content.
//
// Every tensor of every GGUF file at DIR's top level that a guest may name by its
// digest (kMinWeightLookupBytes or more) is indexed by the digest a guest computes
// (protocol/content_digest.h), on a thread of its own from the server's start. The
// store's owner (store_owner.h) answers a worker's find from here when the
// tenant's own store holds nothing: a read-only descriptor of the GGUF file and
// the tensor's offset in it, which the worker maps or copies as it does a store
// entry. So a guest whose model holds the same bytes sends none of them.
//
// The files are shared by all tenants by design (published models: see
// docs/SECURITY.md, "Model library"). The listener only reads them. They must be
// replaced by rename, never edited in place, since workers map their pages: a
// file whose identity (device, inode, size, modification time) changed since it
// was indexed is not served, and is indexed again in the background.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/content_digest.h"
#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

struct ModelLibraryFigures {
    uint64_t files = 0;    // GGUF files indexed and served
    uint64_t tensors = 0;  // their tensors indexed
    uint64_t bytes = 0;    // the bytes of those tensors
};

class ModelLibrary {
  public:
    ModelLibrary() = default;
    ~ModelLibrary();
    ModelLibrary(const ModelLibrary &) = delete;
    ModelLibrary &operator=(const ModelLibrary &) = delete;

    // Opens DIR (read only); indexes nothing yet.
    Status open(const std::string &directory);
    // Indexes DIR on a thread of its own, and logs one line when it is done; files
    // found changed later are indexed again there.
    void start_indexing();
    // Indexes DIR, and the files found changed since, on this thread (tests).
    void index_now();

    // The GGUF file holding `size` bytes whose digest is `digest`, and where they
    // start in it: false when none does, or the file changed since it was indexed.
    bool find(const protocol::ContentDigest &digest, uint64_t size, UniqueFd *file, uint64_t *offset);

    ModelLibraryFigures figures() const;
    const std::string &directory() const { return directory_; }

    // A file as it was indexed: another identity is another file.
    struct Identity {
        dev_t device = 0;
        ino_t inode = 0;
        off_t size = 0;
        timespec modified{};
        bool operator==(const Identity &other) const;
    };

  private:
    struct IndexedFile {
        Identity identity;
        uint64_t tensors = 0;
        uint64_t bytes = 0;
    };
    struct Location {
        std::string file;  // its name in DIR
        uint64_t offset = 0;
        uint64_t size = 0;
    };
    struct Tensor {
        protocol::ContentDigest digest;
        Location location;
    };

    void run();
    void queue_directory();
    bool take_queued(bool wait, std::string *name);
    Status index_file(const std::string &name);
    Status digest_of_range(int fd, uint64_t offset, uint64_t size, std::vector<uint8_t> *block,
                           protocol::ContentDigest *digest);
    bool stopping() const;
    void forget_file_locked(const std::string &name);
    bool open_unchanged(const Location &location, UniqueFd *file);

    std::string directory_;
    UniqueFd directory_fd_;

    mutable std::mutex mutex_;
    std::condition_variable queued_changed_;
    std::deque<std::string> queued_;  // names to index (again)
    bool stopping_ = false;
    std::map<std::string, IndexedFile> files_;
    std::multimap<protocol::ContentDigest, Location> tensors_;
    std::thread indexer_;
};

}  // namespace ggml_remote::host
