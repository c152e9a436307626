# Shell helpers for the tests that start real processes (tests/multirank/faults_test.sh, roles_test.sh,
# tests/cli/launcher_test.sh). Source it; each helper fails the test (exit 1) with what it saw when it gives up.

# Polls until FILE has a line matching the extended regex PATTERN (or fails after 60 s, printing FILE).
wait_for_line() {
  local file=$1 pattern=$2
  for _ in $(seq 600); do
    grep -Eq -- "$pattern" "$file" 2> /dev/null && return 0
    sleep 0.1
  done
  echo "no line matching '$pattern' in $file within 60 s:"; cat "$file"; exit 1
}

# Polls until no process's command line matches PATTERN (or fails after 10 s, listing them): nothing is left behind.
wait_for_none() {
  local pattern=$1
  for _ in $(seq 100); do
    pgrep -f -- "$pattern" > /dev/null || return 0
    sleep 0.1
  done
  echo "processes left behind:"; pgrep -fa -- "$pattern"; exit 1
}

# The pid of rank RANK among the processes whose command line holds MARKER (found by its RANK variable).
rank_pid() {
  local marker=$1 rank=$2
  for pid in $(pgrep -f -- "$marker"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "RANK=$rank"; then echo "$pid"; return 0; fi
  done
  echo "no process of rank $rank found"; pgrep -fa -- "$marker"; exit 1
}
