// HandleTable: the objects of one session, named by numbers the guest can hold.
//
// Handles are never reused within a session, so a stale handle is an error, not
// somebody else's object; and since every session has its own table, a handle of
// another session means nothing here. 0 is never a valid handle.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

namespace ggml_remote::host {

template <class T>
class HandleTable {
  public:
    uint64_t insert(T value) {
        const uint64_t handle = next_++;
        items_.emplace(handle, std::move(value));
        return handle;
    }
    T *find(uint64_t handle) {
        auto it = items_.find(handle);
        return it == items_.end() ? nullptr : &it->second;
    }
    bool erase(uint64_t handle) { return items_.erase(handle) != 0; }
    size_t size() const { return items_.size(); }
    void clear() { items_.clear(); }

    auto begin() { return items_.begin(); }
    auto end() { return items_.end(); }

  private:
    uint64_t next_ = 1;
    std::map<uint64_t, T> items_;
};

}  // namespace ggml_remote::host
