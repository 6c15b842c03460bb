#!/bin/bash
# The branch runner on a GPU (CTest label gpu): a task holding 600 MiB of GPU memory must be seen
# by the nvidia-smi sampler from outside, and the Lightning callback must report peak GPU memory
# from inside when training on the GPU. Skipped (77) where nvidia-smi or torch.cuda is missing.
source "$(dirname "$0")/lib.sh"
py=${PIPEBENCH_PYTHON:-python3}
src=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v nvidia-smi >/dev/null ||
   ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "revs_gpu: skipped: no nvidia-smi or no CUDA torch in $py"
  exit 77
fi
mkdir -p "$work/py/pipebench"
: >"$work/py/pipebench/__init__.py"
ln -s "$src/python/pipebench/revs.py" "$work/py/pipebench/revs.py"
export PYTHONPATH="$work/py"
repo="$work/repo"
new_repo "$repo"
echo "a task runs in a repository" >"$repo/README"
commit "$repo" "first"
cd "$repo" || exit 1
  printf '%s\n' 'import time, torch' 'x = torch.empty(600 << 20, dtype=torch.uint8, device="cuda")' \
    'torch.cuda.synchronize(); time.sleep(3.5)' >"$work/gpu_hold.py"
  printf 'branch,experiment,command,metrics\nmain,gpu,"%s %s; echo {} > m.json",m.json\n' "$py" "$work/gpu_hold.py" >"$work/gpu.csv"
  run "$PB" revs --config "$work/gpu.csv" --output "$work/gpu.json" --repeats 1
  expect_rc 0 "a task holding GPU memory"
  gpu_mb=$(json_get "$work/gpu.json" 'r[0]["metrics"]["pipebench"].get("peak_gpu_memory_mb")')
  echo "nvidia-smi sampled peak: $gpu_mb MiB (the task held 600 MiB plus its CUDA context)"
  [[ $(json_get "$work/gpu.json" '(r[0]["metrics"]["pipebench"].get("peak_gpu_memory_mb") or 0) >= 600') == True ]] && pass || fail "GPU memory sampled ($gpu_mb)"
  if "$py" -c 'import lightning' 2>/dev/null; then
    "$py" - <<'PY' && pass || fail "Lightning callback on the GPU reports peak GPU memory"
import json, os, tempfile
import torch, lightning as L
from pipebench.revs import Recorder, MetricsCallback
path = os.path.join(tempfile.mkdtemp(), "m.json")
cb = MetricsCallback(Recorder(path))
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(1024, 1024)
    def training_step(self, b, i):
        loss = self.l(b[0]).pow(2).mean(); self.log("train_loss", loss); return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
ds = torch.utils.data.TensorDataset(torch.randn(64, 1024))
L.Trainer(accelerator="gpu", devices=1, max_epochs=1, callbacks=[cb], logger=False,
          enable_checkpointing=False, enable_progress_bar=False).fit(
    M(), torch.utils.data.DataLoader(ds, batch_size=16))
m = json.load(open(path))
print("Lightning on the GPU:", {k: m[k] for k in ("peak_gpu_memory_mb", "dataset_info")})
assert m["peak_gpu_memory_mb"] > 4, m
assert m["dataset_info"]["num_train_batches"] == 4
PY
  fi
finish
