# Sourced by the device-session scripts: a summary file and time-boxed stages.
# Set OUT (summary.txt goes there) and LOGS (one log per stage) before sourcing.
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
run_stage() {  # name, timeout seconds, command...: one summary line (exit code, seconds, the log's last line)
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; local rc=$?
  note "$(printf '%-8s rc=%-4s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(grep -v '^\s*$' "$LOGS/$name.log" | tail -n 1 | cut -c1-150)")"
}
