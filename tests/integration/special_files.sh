# special_files (issue 40, class 3): a special file in a path the server reads
# neither hangs nor stops it. A FIFO named *.gguf in --models, beside a model:
# the model is indexed all the same, and SIGTERM ends the server promptly (the
# listener joins the indexer as it stops). --config naming a FIFO: the server
# exits at once, saying what the path is.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

failures=()
mkdir "$WORK/models"
"$MODEL_TOOL" --preset tiny --type f16 -o "$WORK/models/tiny.gguf" >/dev/null
mkfifo "$WORK/models/a-fifo.gguf" "$WORK/models/z-fifo.gguf"  # first and last, whatever the order
mkdir "$WORK/models/folder.gguf"
start_server srv --models "$WORK/models"
# Nothing in the server waits on the FIFOs: its own index line comes, or nothing
# does (a blocked indexer never logs it); 60 s is only a guard for a busy machine.
indexed=$(wait_for_line "$srv_LOG" 'models: .* indexed in' 60) ||
    failures+=("the indexer did not finish with FIFOs in --models")
note "${indexed#*ggml-remote-server: }"
[[ $indexed == *": 1 file, "* ]] || failures+=("the model beside the FIFOs was not indexed: '$indexed'")
grep -q 'a-fifo.gguf: not served: not a regular file (a FIFO)' "$srv_LOG" ||
    failures+=("the FIFO was not named as refused")
kill -TERM "$srv_PID"
if ! wait_pid_exit "$srv_PID" 30; then
    failures+=("the server still runs 30 s after SIGTERM")
    kill -KILL "$srv_PID"  # else the cleanup's wait would hang too
fi

mkfifo "$WORK/server.conf"
expect_server_refusal config_fifo "--config: cannot read $WORK/server.conf: not a regular file \(a FIFO\)" -- \
    --config "$WORK/server.conf"
finish "$srv_LOG"
