#include "host/common/status_board.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <new>
#include <type_traits>

namespace ggml_remote::host {

namespace {

// A board of another layout is not attached: its slot size or its list of figures
// differs. The magic changed with the layout check, so that a build from before it
// (which compares the slot size only) refuses this one's board too.
struct BoardHeader {
    uint32_t magic;
    uint32_t slots;
    uint32_t slot_size;  // sizeof(SessionSlot)
    uint32_t figures;    // figures_layout()
};
constexpr uint32_t kBoardMagic = 0x32534752;  // "RGS2"

// FNV-1a of the list's fields and kinds and of the histograms' bounds: a reordered
// list, or other bounds, keep the slot's size.
constexpr uint32_t figures_layout() {
    uint32_t hash = 2166136261u;
    for (const char c : kSessionFiguresLayout) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
    for (const HistogramSpec &spec : kSessionHistogramSpecs) {
        for (const uint64_t bound : *spec.bounds) hash = (hash ^ static_cast<uint32_t>(bound >> 10)) * 16777619u;
    }
    return hash;
}
static_assert(std::is_standard_layout<SessionSlot>::value, "slots live in shared memory");

// The slots start a cache line after the header, at an offset their atomics can live at.
constexpr size_t kFirstSlotOffset = 64;
static_assert(sizeof(BoardHeader) <= kFirstSlotOffset, "the header fits before the slots");
static_assert(kFirstSlotOffset % alignof(SessionSlot) == 0, "the slots are aligned");
size_t board_size(uint32_t slots) { return kFirstSlotOffset + size_t(slots) * sizeof(SessionSlot); }

SessionSlot *first_slot(const Mapping &mapping) {
    return reinterpret_cast<SessionSlot *>(static_cast<uint8_t *>(mapping.data()) + kFirstSlotOffset);
}

}  // namespace

Status StatusBoard::create(uint32_t slots, StatusBoard *board) {
    Status status = create_shared_memory(board_size(slots), "ggml-remote-status", &board->fd_);
    if (!status) return status;
    status = Mapping::map(board->fd_.get(), 0, board_size(slots), true, &board->mapping_);
    if (!status) return status;
    auto *header = static_cast<BoardHeader *>(board->mapping_.data());
    header->magic = kBoardMagic;
    header->slots = slots;
    header->slot_size = sizeof(SessionSlot);
    header->figures = figures_layout();
    board->slots_ = slots;
    SessionSlot *slot = first_slot(board->mapping_);
    for (uint32_t i = 0; i < slots; ++i) new (&slot[i]) SessionSlot{};  // the memory file starts zeroed
    return Status::success();
}

Status StatusBoard::attach(int fd, StatusBoard *board) {
    board->fd_.reset(fd);
    struct stat st{};
    const int seals = ::fcntl(fd, F_GET_SEALS);
    // Unsealed, a worker could shrink it under the listener's mapping.
    if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(board_size(0)) || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        return error(Code::error, "status board: not a sealed board");
    }
    Status status = Mapping::map(fd, 0, static_cast<size_t>(st.st_size), true, &board->mapping_);
    if (!status) return status;
    const auto *header = static_cast<const BoardHeader *>(board->mapping_.data());
    if (header->magic != kBoardMagic) return error(Code::error, "status board: bad header");
    if (header->slot_size != sizeof(SessionSlot) || header->figures != figures_layout()) {
        return error(Code::error, "status board: another version's layout");
    }
    // The number of slots comes from the file's size, which its seals fix; the
    // header's count is a worker's to write.
    board->slots_ = static_cast<uint32_t>((static_cast<size_t>(st.st_size) - board_size(0)) / sizeof(SessionSlot));
    return Status::success();
}

SessionSlot *StatusBoard::slot(uint32_t index) const { return index < slots_ ? first_slot(mapping_) + index : nullptr; }

void clear_figures(SessionSlot *slot) {
    store_figures(slot, SessionFigureValues{});
    slot->turned_away.store(0, std::memory_order_relaxed);
    slot->guest_session.store(0, std::memory_order_relaxed);
}

void store_figures(SessionSlot *slot, const SessionFigureValues &figures) {
    constexpr auto relaxed = std::memory_order_relaxed;
#define GGML_REMOTE_FIGURE_STORE(field, kind, reply, metric, from, help) slot->field.store(figures.field, relaxed);
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_STORE)
#undef GGML_REMOTE_FIGURE_STORE
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        slot->commands_refused[reason].store(figures.commands_refused[reason], relaxed);
    }
    for (size_t h = 0; h < kSessionHistograms; ++h) {
        const HistogramCounts &counts = figures.histograms[h];
        for (size_t b = 0; b < counts.buckets.size(); ++b)
            slot->histogram_buckets[h][b].store(counts.buckets[b], relaxed);
        slot->histogram_sum_ns[h].store(counts.sum_ns, relaxed);
    }
}

SessionFigureValues load_figures(const SessionSlot &slot) {
    constexpr auto relaxed = std::memory_order_relaxed;
    SessionFigureValues figures;
#define GGML_REMOTE_FIGURE_LOAD(field, kind, reply, metric, from, help) figures.field = slot.field.load(relaxed);
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_LOAD)
#undef GGML_REMOTE_FIGURE_LOAD
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        figures.commands_refused[reason] = slot.commands_refused[reason].load(relaxed);
    }
    for (size_t h = 0; h < kSessionHistograms; ++h) {
        HistogramCounts &counts = figures.histograms[h];
        for (size_t b = 0; b < counts.buckets.size(); ++b)
            counts.buckets[b] = slot.histogram_buckets[h][b].load(relaxed);
        counts.sum_ns = slot.histogram_sum_ns[h].load(relaxed);
        counts.clamp();
    }
    return figures;
}

void record_turned_away(SessionSlot *slot, GuestRefusal reason) {
    slot->turned_away.store(static_cast<uint32_t>(reason) + 1, std::memory_order_relaxed);
}

std::optional<GuestRefusal> turned_away(const SessionSlot &slot) {
    const uint32_t recorded = slot.turned_away.load(std::memory_order_relaxed);
    if (recorded == 0 || recorded > kGuestRefusalReasons) return std::nullopt;
    // A worker's slot names only what a worker decides, whatever it wrote there.
    const auto reason = static_cast<GuestRefusal>(recorded - 1);
    return decided_by_worker(reason) ? std::optional<GuestRefusal>(reason) : std::nullopt;
}

void mark_guest_session(SessionSlot *slot) { slot->guest_session.store(1, std::memory_order_relaxed); }

bool is_guest_session(const SessionSlot &slot) { return slot.guest_session.load(std::memory_order_relaxed) != 0; }

int StatusBoard::find_free() const {
    for (uint32_t i = 0; i < slots_; ++i) {
        if (slot(i)->live.load() == 0) return static_cast<int>(i);
    }
    return -1;
}

void clear_core_fields(SessionSlot *slot) {
    slot->cores_computing.store(0);
    slot->cores_wanted.store(0);
    slot->cores_last_compute_ns.store(0);
    slot->cores_threads.store(0);
    slot->cores_shared_computes.store(0);
    slot->cores_light.store(0);
    slot->cores_duty_milli.store(0);
    slot->cores_window_ns.store(0);
}

}  // namespace ggml_remote::host
