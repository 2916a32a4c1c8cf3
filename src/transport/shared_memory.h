// Shared memory between guest and host: anonymous memory files passed over the
// unix socket, and mappings of them (or of a guest's model file) on each side.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

// Creates a memory file of `size` bytes whose size is sealed: the other side can
// neither shrink it (which would make our accesses fault) nor grow it.
Status create_shared_memory(size_t size, const char *name, UniqueFd *fd);

// Whether a memory file that a peer made is safe to map `size` bytes of: at
// least that long, and sealed against shrinking (else the peer could truncate
// it and make every access of ours fault).
Status check_sealed_memory(int fd, uint64_t size);

// A mapping of [offset, offset + size) of a file; unmapped on destruction.
class Mapping {
  public:
    Mapping() = default;
    Mapping(Mapping &&other) noexcept;
    Mapping &operator=(Mapping &&other) noexcept;
    Mapping(const Mapping &) = delete;
    Mapping &operator=(const Mapping &) = delete;
    ~Mapping();

    // Every mapping has 2 MiB of no-access address space on each side, so that a
    // kernel running off its end faults instead of touching a neighbour.
    // Maps a range of `fd`, which need not be page-aligned. A read-only mapping
    // also checks that the range lies inside the file.
    static Status map(int fd, uint64_t offset, size_t size, bool writable, Mapping *mapping);
    // Private, zero-filled memory of `size` bytes, backed by transparent huge pages
    // where the kernel allows them (aligned to 2 MiB, MADV_HUGEPAGE): a model's
    // weights read once per token take fewer TLB misses than in 4 KiB pages.
    // data() lies `phase_in_page` bytes past a page boundary (below a page): a
    // buffer can then share pages with a file whose bytes have that phase.
    static Status anonymous(size_t size, Mapping *mapping, size_t phase_in_page = 0);

    // Puts pages of `fd` in place of [offset, offset + length) of this mapping, which
    // must be page-aligned and inside it: shared (writes reach the file) or private
    // (copy-on-write). `file_offset` must be page-aligned too.
    Status overlay_file(size_t offset, size_t length, int fd, uint64_t file_offset, bool shared);

    // Backs the pages that hold [offset, offset + length) with base pages, not huge
    // ones: a few bytes written there then cost a 4 KiB page, not 2 MiB.
    void prefer_small_pages(size_t offset, size_t length);

    // Sets [offset, offset + length) of a private mapping to zero: its whole pages
    // are replaced by fresh ones, which take no memory until written (a KV cache
    // cleared when made is mostly never written), the partial ones at the ends are
    // cleared in place. Never for a mapping shared with another process.
    Status zero(size_t offset, size_t length);

    void *data() const { return data_; }
    size_t size() const { return size_; }

  private:
    // Reserves guarded address space whose inner start is `phase` past a 2 MiB
    // boundary and maps `length` bytes there (mmap's prot, flags, fd and offset);
    // data() is then that start. Nothing stays reserved when it fails.
    Status map_guarded(size_t length, size_t phase, int prot, int flags, int fd, uint64_t file_offset);

    void *base_ = nullptr;  // page-aligned start of the reservation, guards included
    size_t length_ = 0;     // its length
    void *data_ = nullptr;  // the requested offset inside it
    size_t size_ = 0;
};

}  // namespace ggml_remote
