// What `ggml-remote-server status` shows of a server's answer: the tables read
// from the reply's tail, drawn as text or as JSON. Pure functions of the answer,
// so that the unit tests see exactly what an operator does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/commands.h"

namespace ggml_remote::status {

// What a running server answered: its reply and the tables in the reply's tail.
struct ServerReport {
    protocol::ServerStatus::Reply reply{};
    std::vector<protocol::StatusDevice> devices;
    std::vector<protocol::StatusSession> sessions;
    // The sessions' uploads of their weights, in the same order; empty when the
    // server does not count them (one from before they were counted).
    std::vector<protocol::StatusUpload> uploads;
};

// The tables of the reply to `request` whose tail is `tail` (and whose fixed reply
// is in report->reply already); false where the tail does not hold them exactly.
bool read_tables(const protocol::ServerStatus::Request &request, const std::vector<uint8_t> &tail,
                 ServerReport *report);

// The UPLOAD column of a session's row: how much of its weights is there, sent or
// found ("37%"); "-" for a session that flagged no weights.
std::string upload_cell(const protocol::StatusUpload &upload);
// The line below a session's row that tells its upload in MiB; empty for a session
// that flagged no weights.
std::string upload_line(const protocol::StatusUpload &upload);

// The whole answer as tables for people, and as one JSON document; `now` in
// seconds since the epoch, for the sessions' uptimes.
std::string status_text(const std::string &endpoint, const ServerReport &report, int64_t now);
std::string status_json(const std::string &endpoint, const ServerReport &report, int64_t now);

}  // namespace ggml_remote::status
