#include "protocol/commands.h"

namespace ggml_remote::protocol {

const char *command_name(CommandId id) {
    switch (id) {
#define GGML_REMOTE_COMMAND_NAME(number, name, Cmd, size) \
    case CommandId::name:                                 \
        return #name;
        GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_NAME)
#undef GGML_REMOTE_COMMAND_NAME
        case CommandId::count_:
            break;
    }
    return "unknown";
}

}  // namespace ggml_remote::protocol
