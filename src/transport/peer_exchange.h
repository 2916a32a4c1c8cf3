// PeerExchange: the memory through which the servers of one guest's tensor-parallel
// group sum their partial results (ggml's comm all-reduce, llama.cpp's -sm tensor),
// with no bytes through the guest and no wait of the guest's.
//
// The guest makes a sealed memory file and hands it to each of its servers (over
// the unix socket of that session only: the file is the capability) with the rank
// each has in the group, the bytes a slot holds and a token of its choosing.
//
//   [a header per rank, 64 bytes each][rank 0: slot 0, slot 1][rank 1: ...]...
//
// Each all-reduce is a step. A rank writes its step-s partial into its slot s % 2,
// then publishes s in its header (a futex word); it reads the others' slot s % 2
// once each has published s. A rank is then at most one step ahead of any other
// (it needs everyone's step s before it publishes s + 1), so the slot it writes
// next is never one that another rank still reads.
//
// Everything in the file is hostile input: the guest and every other rank can
// write all of it at any time. Sizes and places come from our own place in the
// group, never from the file; a header must show our token, our byte count and a
// step of s or s + 1; the partials are only summed, so torn or wrong values give a
// wrong sum, never an access outside the file.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "protocol/status.h"
#include "transport/shared_memory.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

class PeerExchange {
  public:
    static constexpr uint32_t kMaxRanks = 16;
    static constexpr uint64_t kMaxSlotBytes = 256ull << 20;
    static constexpr size_t kHeaderBytes = 64;
    using Token = std::array<uint8_t, 16>;

    // Where one member stands in its group.
    struct Place {
        uint32_t rank = 0;
        uint32_t ranks = 0;
        uint64_t slot_bytes = 0;  // a multiple of 64, at most kMaxSlotBytes
        Token token{};
    };

    // Whether `place` is one this side serves: 2..kMaxRanks ranks, its rank among
    // them, a slot size in bounds.
    static Status check_place(const Place &place);
    // The memory file's size for `place` (checked first).
    static uint64_t area_bytes(const Place &place);
    // Makes the memory file for `place`'s group (guest side).
    static Status create_area(const Place &place, UniqueFd *file);
    // Maps a memory file that a guest made (server side): it must be sealed against
    // shrinking and hold area_bytes(place). The member keeps the descriptor, with a
    // lock on its rank's byte that the kernel drops when its process ends: that is
    // how the others tell a peer that died from one that is slow.
    static Status attach(UniqueFd file, const Place &place, PeerExchange *exchange);
    // The guest's own mapping of the file it made, to mark ranks gone.
    static Status watch(int fd, const Place &place, PeerExchange *exchange);

    // Sums `count` floats at `values` with the same of every other rank, in rank
    // order, so that every rank holds bit for bit the same sum. Waits for the
    // others at most `timeout`; a failure breaks the exchange for good (each
    // later step fails at once with the same reason).
    Status all_reduce_f32(float *values, size_t count, std::chrono::milliseconds timeout);
    // Marks `rank` as gone from the group (guest side, when it lost that server):
    // the others fail their steps at once instead of waiting for it.
    void mark_gone(uint32_t rank);

    // Ranks in one process hold no lock against each other (POSIX locks are the
    // process's): tests that run a group in threads turn the check off.
    void watch_peer_processes(bool watch) { watch_peer_processes_ = watch; }
    const Place &place() const { return place_; }
    uint32_t steps() const { return step_; }

  private:
    struct Header;
    // Maps the file for a place already checked.
    Status map_area(int fd, const Place &place);
    Header *header(uint32_t rank) const;
    float *slot(uint32_t rank, uint32_t step) const;
    // Waits until `rank` has published `step`, and checks its header.
    Status wait_for(uint32_t rank, uint32_t step, uint64_t bytes, std::chrono::steady_clock::time_point deadline);
    Status fail(Status status);

    // Whether the process of `rank` still holds its rank's lock.
    bool peer_process_alive(uint32_t rank) const;

    UniqueFd file_;  // attach's: closing it would drop our lock
    Mapping mapping_;
    Place place_;
    bool watch_peer_processes_ = false;
    uint32_t step_ = 0;  // the last step this rank published
    Status broken_;
};

}  // namespace ggml_remote
