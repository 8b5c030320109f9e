#!/usr/bin/env bash
# Round trip through a real Label Studio server (not run by CI; needs the network for pip once):
#   build a demo run -> prb annotate export -> Label Studio project with annotation/label_studio.xml
#   (via label-studio-sdk) -> import batch-001 -> annotate it through the API -> export JSON ->
#   prb annotate import -> prb annotate status.
# Label Studio lives in its own venv (LS_VENV, default /tmp/ls-venv) so its pins never touch .venv.
# The server listens on 127.0.0.1 only, with a throwaway data dir, user and token made here.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
LS_VENV="${LS_VENV:-/tmp/ls-venv}"
LS_PORT="${LS_PORT:-8089}"
RUN_ID="${RUN_ID:-ls-roundtrip}"
WORK="$(mktemp -d /tmp/prb-ls-XXXXXX)"
PRB="$REPO/.venv/bin/prb"
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 HF_HUB_OFFLINE=1

step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

step "install label-studio into $LS_VENV"
[ -x "$LS_VENV/bin/python" ] || python3.11 -m venv "$LS_VENV"
"$LS_VENV/bin/pip" install -q --upgrade pip
"$LS_VENV/bin/pip" install -q "label-studio==1.23.2" "label-studio-sdk==2.1.2"
"$LS_VENV/bin/pip" list 2>/dev/null | grep -i -E '^(label-studio|label-studio-sdk|django) '

step "build demo run $RUN_ID and export blinded batches"
"$PRB" demo --run-id "$RUN_ID" >"$WORK/demo.log" 2>&1 || { tail -20 "$WORK/demo.log"; exit 1; }
tail -4 "$WORK/demo.log"
RUN_DIR="$REPO/outputs/$RUN_ID"
# Label Studio names annotators by their numeric user id (the first user is 1): the pool must
# hold the ids the tool will report, since prb refuses labels from unassigned annotators
"$PRB" annotate export "$RUN_DIR" --batch-size 8 --annotators 1 --pool 1 --force

step "start label-studio on 127.0.0.1:$LS_PORT"
TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(20))')"
PASSWORD="$(python3 -c 'import secrets; print(secrets.token_urlsafe(16))')"
LABEL_STUDIO_BASE_DATA_DIR="$WORK/ls-data" "$LS_VENV/bin/label-studio" start \
  --no-browser --internal-host 127.0.0.1 --port "$LS_PORT" --data-dir "$WORK/ls-data" \
  --username annotator@prb.local --password "$PASSWORD" \
  --enable-legacy-api-token --user-token "$TOKEN" >"$WORK/ls.log" 2>&1 &
LS_PID=$!
trap 'kill "$LS_PID" 2>/dev/null || true; wait "$LS_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
  curl -fs "http://127.0.0.1:$LS_PORT/health" >/dev/null 2>&1 && break
  kill -0 "$LS_PID" 2>/dev/null || { tail -30 "$WORK/ls.log"; exit 1; }
  sleep 1
done
curl -fs "http://127.0.0.1:$LS_PORT/health" && echo

step "project, import, annotate, export through label-studio-sdk"
LS_URL="http://127.0.0.1:$LS_PORT" LS_TOKEN="$TOKEN" "$LS_VENV/bin/python" - \
  "$REPO/annotation/label_studio.xml" "$RUN_DIR/annotation/batches/batch-001/label_studio_tasks.json" \
  "$WORK/ls_export.json" <<'PY'
import json, os, sys
from label_studio_sdk import LabelStudio

xml_path, tasks_path, out_path = sys.argv[1:4]
ls = LabelStudio(base_url=os.environ["LS_URL"], api_key=os.environ["LS_TOKEN"])
project = ls.projects.create(title="prb round trip", label_config=open(xml_path).read())
tasks = json.load(open(tasks_path))
ls.projects.import_tasks(id=project.id, request=tasks)
made = list(ls.tasks.list(project=project.id))
print(f"project {project.id}: {len(made)} tasks imported of {len(tasks)}")

def rating(name, to, n):
    return {"from_name": name, "to_name": to, "type": "rating", "value": {"rating": n}}

for k, task in enumerate(made):  # a stand-in annotator: deterministic, varied labels
    pref = ["A_much_better", "B_slightly_better", "tie"][k % 3]
    result = [
        {"from_name": "preference", "to_name": "answer_a", "type": "choices",
         "value": {"choices": [pref]}},
        *(rating(f"{q}_{s}", f"answer_{s}", 4 + (k + i) % 2)
          for i, q in enumerate(("correct", "relevant", "helpful")) for s in "ab"),
    ]
    if pref != "tie":
        result.append({"from_name": "reason", "to_name": "question", "type": "textarea",
                       "value": {"text": ["Profile cue matched by one answer's format."]}})
    ls.annotations.create(id=task.id, result=result, lead_time=12.5)
data = b"".join(ls.projects.exports.download_sync(project.id, export_type="JSON"))
open(out_path, "wb").write(data)
exported = json.loads(data)
print(f"exported {len(exported)} tasks, {sum(len(t['annotations']) for t in exported)} annotations")
print("first annotation keys:", sorted(exported[0]["annotations"][0]))
PY

step "prb annotate import + status"
"$PRB" annotate import "$RUN_DIR" "$WORK/ls_export.json"
"$PRB" annotate status "$RUN_DIR" --exclude-below 0.5
echo "export kept at $WORK/ls_export.json; server log $WORK/ls.log"
step "done"
