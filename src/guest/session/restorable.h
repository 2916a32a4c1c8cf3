// What a new connection puts back: the guest objects that name host objects, and
// the report of what they could restore.
#pragma once

#include <string>
#include <vector>

#include "guest/session/calls.h"

namespace ggml_remote::guest {

// What a reconnection put back, and what it could not.
struct RestoreReport {
    size_t restored = 0;            // host objects made again
    std::vector<std::string> lost;  // buffers whose contents only the host held
    bool scratch_lost = false;      // compute buffers: the graph in flight cannot run again
    bool intact() const { return lost.empty() && !scratch_lost; }
};

// A guest object that names host objects (a buffer, a backend). On a new
// connection it makes them again under the same guest-side identity, and puts
// back what it can of their contents.
class Restorable {
  public:
    virtual ~Restorable() = default;
    // Makes every call through `calls`, never through the session: the session's
    // lock is held while objects are restored (no other call may come in between),
    // so the session's own entry points would wait for ever.
    virtual void restore(SessionCalls &calls, RestoreReport *report) = 0;
};

}  // namespace ggml_remote::guest
