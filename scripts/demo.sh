#!/usr/bin/env bash
# The stead demo: an agent-like loop runs in a sandbox as a supervised
# service, writing notes and state; we stop it (its stop hook checkpoints),
# kill -9 the daemon, restart it, start the sandbox again, and the agent
# carries on from where it was, with every file still there. Then the work
# goes off the machine: an encrypted, incremental push to a repository, and
# a disaster-recovery drill that restores it through an empty daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
export PATH=$PWD/bin:$PATH

DATA=${STEAD_DATA_DIR:-/var/lib/stead}
export STEAD_DATA_DIR=$DATA
RUN=${STEAD_RUN_DIR:-/run/stead}
PORT=${STEAD_PORT:-7878}
REPO=${STEAD_REPO:-/var/lib/stead-demo-repo}   # a directory here; s3://... works the same
export STEAD_ENDPOINT=http://127.0.0.1:$PORT
LOG=$(mktemp /tmp/stead-demo-daemon.XXXX.log)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

start_daemon() {
  stead serve --data-dir "$DATA" --run-dir "$RUN" --listen 127.0.0.1:$PORT --socket "$RUN/stead.sock" --repo "$REPO" >>"$LOG" 2>&1 &
  DAEMON=$!
  for _ in $(seq 200); do
    [ -f "$DATA/admin.key" ] && stead info >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "daemon did not start; log:"; cat "$LOG"; exit 1
}
cleanup() { kill "$DAEMON" 2>/dev/null || true; }
trap cleanup EXIT

say "starting stead (data in $DATA, log in $LOG)"
start_daemon
stead delete --purge demo-agent >/dev/null 2>&1 || true

# The "agent": resumes from /data/state.json, appends a note each step, and on
# the stop hook line "/checkpoint" writes a checkpoint and exits cleanly.
AGENT='
step=$(cat /data/state.json 2>/dev/null | sed -n "s/.*\"step\": *\([0-9]*\).*/\1/p"); step=${step:-0}
echo "agent: resuming at step $step"
while true; do
  if read -t 1 line && [ "$line" = "/checkpoint" ]; then
    echo "{\"step\": $step, \"checkpointed\": \"$(date -u +%FT%TZ)\"}" > /data/checkpoint.json
    # ...and the same outside the sandbox, through its own API socket.
    curl -s -o /dev/null --unix-socket /run/stead/api.sock -H "Authorization: Bearer $STEAD_TOKEN" \
      -X PUT -H "Content-Type: application/json" --data @/data/checkpoint.json \
      http://stead/v1/sandboxes/$STEAD_SANDBOX/checkpoints/progress
    echo "agent: checkpointed at step $step"; exit 0
  fi
  step=$((step+1))
  echo "- step $step: looked at the problem again ($(date -u +%T))" >> /workspace/notes.md
  echo "{\"step\": $step}" > /data/state.json.tmp && mv /data/state.json.tmp /data/state.json
done'

say "creating sandbox demo-agent with a supervised agent service"
stead create demo-agent --restart always --stop-line /checkpoint --stop-grace 10s -- bash -c "$AGENT"
sleep 4
say "the agent has been working:"
stead exec demo-agent -- sh -c 'tail -n 3 /workspace/notes.md; cat /data/state.json'

say "contained: root inside is an unprivileged id range on the host, and the sandbox sees its own size"
stead exec --user root demo-agent -- sh -c 'echo "uid_map (inside host count): $(cat /proc/self/uid_map | tr -s " ")"; echo "nproc: $(nproc)"; grep MemTotal /proc/meminfo'

say "on the network: its own address, an egress policy applied live, a port served through the proxy"
stead network set demo-agent --allow '*.pypi.org' --allow files.pythonhosted.org >/dev/null
stead network show demo-agent | head -n 6
stead exec --background demo-agent -- sh -c 'mkdir -p /workspace/site && echo "<h1>report of demo-agent</h1>" > /workspace/site/index.html && cd /workspace/site && exec python3 -m http.server 8000' >/dev/null
url=$(stead --json port expose demo-agent 8000 --public | python3 -c 'import json,sys; print(json.load(sys.stdin)["url"])')
for _ in $(seq 50); do curl -fs "$url" >/dev/null 2>&1 && break; sleep 0.1; done
echo "GET $url -> $(curl -fsS "$url")"
echo "from inside, a name off the allow-list does not resolve: $(stead exec demo-agent -- sh -c 'getent hosts example.com || echo refused by the policy')"

say "stopping the sandbox (the stop hook tells the agent to checkpoint)"
stead stop demo-agent
stead files cat demo-agent /data/checkpoint.json
stop_notes=$(mktemp); stead files cat demo-agent /workspace/notes.md > "$stop_notes"
echo "notes at stop: $(wc -l < "$stop_notes") lines, sha256 $(sha256sum < "$stop_notes" | cut -c1-16)"

say "kill -9 of the daemon, then a restart"
kill -9 "$DAEMON"; wait "$DAEMON" 2>/dev/null || true
start_daemon
stead list

say "starting the sandbox again: the agent resumes where it stopped"
stead start demo-agent
sleep 3
stead exec demo-agent -- sh -c 'head -n 2 /workspace/notes.md; echo ...; tail -n 3 /workspace/notes.md; cat /data/state.json'
now_notes=$(mktemp); stead files cat demo-agent /workspace/notes.md > "$now_notes"
if cmp -s "$stop_notes" <(head -c "$(stat -c %s "$stop_notes")" "$now_notes"); then
  echo "notes now: $(wc -l < "$now_notes") lines; the $(wc -l < "$stop_notes") lines written before the stop are intact (byte for byte)"
else
  echo "notes changed across the restart!"; exit 1
fi
say "agent log (kept in the sandbox at /var/log/agent.log):"
stead logs demo-agent | tail -n 8
say "what a resuming agent reads first (stead orient):"
stead orient demo-agent --file /workspace/notes.md | head -n 20
say "off the machine: push to the repository (encrypted, deduplicated, incremental)"
stead repo info 2>/dev/null | grep -q 'Initialized: *yes' || stead repo init
stead push demo-agent
stead exec demo-agent -- sh -c 'echo "- a note written after the first push" >> /workspace/notes.md'
stead push demo-agent      # only what changed is read and sent
stead remote ls demo-agent
say "disaster-recovery drill: restore the latest push through an empty daemon (a lost machine), verify, time it"
stead drill demo-agent --empty-data-dir --verify "grep -q 'after the first push' /workspace/notes.md"
say "done: the notes, the state and the checkpoint survived stop, kill -9 and restart, and restore on a new machine"
echo "(the sandbox keeps running; remove it with: stead delete --purge demo-agent)"
