"""host.compare --cluster on a real local Dask cluster: a scheduler and workers started as users start them
(python -m host.cluster scheduler / worker), two of them owning a board twin each, one owning nothing, two owning a
fake GPU each. Every planned row lands exactly once, on a worker holding its device, and the MCU rows are bit-exact;
a worker killed mid-row gives its row to the other; the last board's worker lost turns the rest of its rows into
error rows instead of a hang, and --resume completes them; Ctrl-C cancels what is outstanding.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT, gpu_missing, run_module

pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install -e '.[cluster]')")

from host.errors import SpecError
from host.sweep.cluster import check_address
from host.sweep.cluster_bench import Node
from host.sweep.nodes import build_parser, default_name, owned_devices
from host.sweep.worker import DIE_AT_ROW_ENV, KbenchWorker, model_resource


class Cluster:
    """A scheduler on a free port and the workers started on it; `stop` ends them all."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.nodes: list[Node] = []
        scheduler = self.node("--verbose", "scheduler", "--host", "127.0.0.1", "--port", "0")
        self.address = scheduler.wait_for(r"scheduler at (tcp://[0-9.]+:[0-9]+)").group(1)

    def node(self, *args: str, env: dict | None = None) -> Node:
        node = Node(self.tmp / f"node-{len(self.nodes)}.log", *args, env=env)
        self.nodes.append(node)
        return node

    def worker(self, *args: str, env: dict | None = None) -> tuple[Node, str]:
        """A started worker and its name."""
        node = self.node("worker", "--scheduler", self.address, *args, env=env)
        return node, node.wait_for(r"worker (\S+) at tcp://")[1]

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.stop()


def sweep(cluster: Cluster, out: Path, *args: str, timeout: float = 600, env: dict | None = None):
    return run_module("host.compare", "--cluster", cluster.address, "--out", str(out), *args, timeout=timeout,
                      env={**os.environ, **(env or {})})


def rows(out: Path) -> list[dict]:
    with (out / "results.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def keys(found: list[dict]) -> Counter:
    return Counter((r["target"], r["kernel"], r["dtype"], r["seq"], r["dim"], r["causal"]) for r in found)


MCU = ("--targets", "mcu", "--seq", "96,128", "--dim", "16,32", "--heads", "2")  # 8 rows, about a second each


def test_rows_run_once_each_on_a_worker_holding_their_device(cluster, tmp_path):
    (_, twin_a), (_, twin_b) = cluster.worker("--sim"), cluster.worker("--sim")
    _, plain = cluster.worker()
    out = tmp_path / "out"
    done = sweep(cluster, out, "--targets", "cpu,mcu,asic", "--seq", "17,97,128", "--dim", "16,32", "--heads", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    found = rows(out)
    # 3 seq × 2 dim × 2 causal = 12 configurations, each on cpu, mcu and the asic target's one default datapath
    assert len(found) == 36 and set(keys(found).values()) == {1}
    assert all(r["status"] == "ok" for r in found), [r["message"] for r in found if r["status"] != "ok"]
    mcu = [r for r in found if r["target"] == "mcu"]
    assert all(r["bit_exact"] == "1" and "twin" in r["device"] for r in mcu)
    assert {r["worker"] for r in mcu} == {twin_a, twin_b}, "both board workers measured MCU rows"
    assert {r["worker"] for r in found if r["target"] != "mcu"} <= {twin_a, twin_b, plain}
    assert len({r["run_id"] for r in found}) == 1 and all(r["host"] for r in found)
    assert "worker" in done.stdout.splitlines()[0] and twin_a in done.stdout, "the summary says where rows ran"
    log = (out / "runs.jsonl").read_text()
    assert twin_a in log and "stm32f407" in log, "the run's log names the workers and their resources"


def test_a_worker_killed_mid_row_gives_the_row_to_the_other(cluster, tmp_path):
    _, survivor = cluster.worker("--sim")
    doomed, victim = cluster.worker("--sim", env={DIE_AT_ROW_ENV: "2"})
    out = tmp_path / "out"
    done = sweep(cluster, out, *MCU)
    assert doomed.process.wait(timeout=60) == -signal.SIGKILL, "the hook killed the worker as its 2nd row began"
    assert done.returncode == 0, done.stderr[-3000:]
    found = rows(out)
    assert len(found) == 8 and set(keys(found).values()) == {1}, "every row exactly once"
    assert all(r["status"] == "ok" and r["bit_exact"] == "1" for r in found)
    by_worker = Counter(r["worker"] for r in found)
    # The victim finished one row before it died; that row is the victim's in the file, or (when the worker died
    # before its result was fetched) measured again by the survivor. The row it died in is the survivor's.
    assert by_worker[victim] <= 1 and by_worker[survivor] == 8 - by_worker[victim], by_worker


def test_the_last_board_lost_ends_its_rows_as_errors_and_resume_completes_them(cluster, tmp_path):
    doomed, _ = cluster.worker("--sim", env={DIE_AT_ROW_ENV: "3"})
    _, plain = cluster.worker()
    out = tmp_path / "out"
    started = time.monotonic()
    done = sweep(cluster, out, *MCU, "--targets", "mcu,cpu", "--cluster-wait", "2")
    assert time.monotonic() - started < 120, "the sweep does not hang on the vanished board"
    assert doomed.process.wait(timeout=60) == -signal.SIGKILL
    assert done.returncode == 1
    found = rows(out)
    assert len(found) == 16 and set(keys(found).values()) == {1}
    lost = [r for r in found if r["status"] != "ok"]  # the row the board's worker died in, and those after it
    assert 6 <= len(lost) <= 8 and all(r["target"] == "mcu" and r["status"] == "error" for r in lost)
    assert all("no worker left" in r["message"] and "stm32f407" in r["message"] for r in lost), lost[0]["message"]
    assert all(r["worker"] == plain for r in found if r["target"] == "cpu")
    _, fresh = cluster.worker("--sim")
    again = sweep(cluster, out, *MCU, "--targets", "mcu,cpu", "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {16 - len(lost)} of 16 rows" in again.stderr
    final = rows(out)
    assert len(final) == 16 and set(keys(final).values()) == {1}, "errors replaced, nothing written twice"
    assert all(r["status"] == "ok" and r["bit_exact"] in ("1", "") for r in final)
    assert sum(r["worker"] == fresh for r in final) == len(lost)


def test_a_killed_sweep_resumes_on_the_cluster_and_ctrl_c_cancels_its_tasks(cluster, tmp_path):
    cluster.worker("--sim")
    out = tmp_path / "out"
    killed = sweep(cluster, out, *MCU, env={"KBENCH_STOP_AFTER_ROWS": "3", "KBENCH_STOP_SIGNAL": "KILL"})
    assert killed.returncode == -signal.SIGKILL and len(rows(out)) == 3
    resumed = sweep(cluster, out, *MCU, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(rows(out)) == 8 and set(keys(rows(out)).values()) == {1}

    interrupted = sweep(cluster, tmp_path / "int", *MCU, env={"KBENCH_STOP_AFTER_ROWS": "1",
                                                             "KBENCH_STOP_SIGNAL": "INT"})
    assert interrupted.returncode == 130 and "--resume" in interrupted.stderr
    from distributed import Client

    with Client(cluster.address, timeout=10) as client:
        deadline = time.monotonic() + 30
        while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0, "tasks cancelled"


def test_gpu_rows_split_between_two_gpu_workers(cluster, tmp_path):
    (_, gpu_a), (_, gpu_b) = cluster.worker("--gpu-device", "fake"), cluster.worker("--gpu-device", "fake")
    out = tmp_path / "out"
    done = sweep(cluster, out, "--targets", "gpu", "--kernels", "naive,flash", "--seq", "17,64,97,128", "--dim", "32",
                 "--heads", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    found = rows(out)
    assert len(found) == 16 and set(keys(found).values()) == {1}
    assert all(r["status"] == "ok" and r["device"].startswith("fake GPU") for r in found)
    by_worker = Counter(r["worker"] for r in found)
    assert set(by_worker) == {gpu_a, gpu_b}, by_worker
    other = sweep(cluster, tmp_path / "h200", "--targets", "gpu", "--seq", "17", "--cluster-gpu", "NVIDIA H200")
    assert other.returncode == 1 and "gpu-nvidia-h200" in other.stderr  # no worker holds one: exit 1
    assert "gpu models held: gpu-fake-gpu" in other.stderr, "the models the workers hold are named"


def test_a_lost_scheduler_ends_the_sweep_in_one_line_and_keeps_its_rows(cluster, tmp_path):
    cluster.worker("--sim")
    port = cluster.address.rsplit(":", 1)[1]
    taken = Node(tmp_path / "second.log", "scheduler", "--host", "127.0.0.1", "--port", port)
    assert taken.process.wait(timeout=60) == 1 and "cannot listen" in taken.log.read_text()
    assert "Traceback" not in taken.log.read_text()
    out = tmp_path / "out"
    sweep_process = subprocess.Popen([sys.executable, "-m", "host.compare", "--cluster", cluster.address, "--out",
                                      str(out), *MCU], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ((out / "results.csv").exists() and rows(out)):
        time.sleep(0.1)
    cluster.nodes[0].process.kill()  # the scheduler
    _, stderr = sweep_process.communicate(timeout=120)
    assert sweep_process.returncode == 1 and "lost the scheduler" in stderr and "--resume" in stderr, stderr
    assert "Traceback" not in stderr
    kept = rows(out)
    assert 1 <= len(kept) < 8 and set(keys(kept).values()) == {1} and all(r["status"] == "ok" for r in kept)


@pytest.mark.gpu
def test_gpu_rows_split_between_two_real_gpus(cluster, tmp_path):
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two CUDA GPUs")
    (_, gpu_a), (_, gpu_b) = (cluster.worker("--gpu-device", "cuda", "--gpu", index) for index in "01")
    out = tmp_path / "out"
    done = sweep(cluster, out, "--targets", "gpu", "--kernels", "flash", "--seq", "1024,2048", "--dim", "64",
                 "--heads", "8", "--batch", "1,2")
    assert done.returncode == 0, done.stderr[-3000:]
    found = rows(out)
    assert len(found) == 8 and all(r["status"] == "ok" for r in found)
    assert set(Counter(r["worker"] for r in found)) == {gpu_a, gpu_b}


def test_a_shape_its_target_cannot_run_is_skipped_by_the_sweep_and_never_sent_to_a_worker(tmp_path, monkeypatch):
    """The coordinator asks the target (shape_supported) before it submits a row, as a local sweep does before it
    runs one: a shape the target cannot run is a skipped row written here, naming no worker and no device, and no
    task goes to the cluster for it (the review found the check made only on the worker). An in-process Dask cluster,
    so that the test's cpu target, which runs no decode, is the one the coordinator and the worker both see."""
    from distributed import LocalCluster

    from host.cpu import target as cpu
    from host.results_file import ResultsFile
    from host.sweep import cli as compare
    from host.sweep import cluster as sweep_cluster

    monkeypatch.setattr(cpu, "supports", lambda p: (p.square, "" if p.square else "no decode here (this test's cpu)"))
    sent = []
    rows_of = sweep_cluster.Cluster.rows

    def recorded(self, jobs, *args):
        sent.extend(job.label() for job in jobs)
        return rows_of(self, jobs, *args)

    monkeypatch.setattr(sweep_cluster.Cluster, "rows", recorded)
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None, protocol="tcp://",
                      host="127.0.0.1") as local:
        code = compare.main(["--cluster", local.scheduler_address, "--targets", "cpu", "--seq", "17", "--q-len",
                             "3,17", "--heads", "2", "--dim", "8", "--causal", "1", "--iters", "1", "--warmup", "0",
                             "--out", str(tmp_path)])
    found = {row.q_len: row for row in ResultsFile(tmp_path / "results.csv").read()}
    assert code == 0 and sorted(found, key=str) == [3, None]
    assert found[None].status == "ok" and found[None].worker, "q_len 17 = seq: the square row, measured on the worker"
    skipped = found[3]
    assert (skipped.status, skipped.worker, skipped.device) == ("skipped", "", "")
    assert skipped.message == "skipped: no decode here (this test's cpu)"
    assert sent == ["cpu/numpy B1 H2 N17 d8 causal"]


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tcp://[::1]:8786", "ws://sched.lan:80",
                                     "tcp://[fe80::1]:1"])
def test_plain_scheduler_addresses_are_accepted_ipv6_in_brackets(address):
    assert check_address(address) == address


@pytest.mark.parametrize("address,words", [
    ("tls://127.0.0.1:8786", "--cluster tls://127.0.0.1:8786: tls:// needs TLS certificates, which kbench has no "
                             "option for; allowed: tcp://HOST:PORT or ws://HOST:PORT"),
    ("WSS://h:1", "wss:// needs TLS certificates"),  # the scheme's case does not slip it through
    ("tcp://::1:8786", "is not a scheduler address"), ("tcp://[::1:8786", "is not a scheduler address"),
    ("tcp://[]:1", "is not a scheduler address")])
def test_encrypted_and_malformed_scheduler_addresses_are_refused(address, words):
    with pytest.raises(SpecError, match=re.escape(words)):
        check_address(address)


def test_cluster_arguments_are_checked_in_one_line(tmp_path):
    bad = [(("--cluster", "localhost"), 2, "tcp://HOST:PORT"),
           (("--cluster", "tls://127.0.0.1:1"), 2, "tls:// needs TLS certificates"),
           (("--cluster", "tcp://[::1]:1"), 1, "cannot reach the scheduler"),
           (("--cluster", "tcp://127.0.0.1:1"), 1, "cannot reach the scheduler"),
           (("--cluster", "tcp://127.0.0.1:1", "--sim", "--targets", "mcu"), 2, "--sim chooses a device"),
           # at its default value, typed out, a device option still chooses this machine's device
           (("--cluster", "tcp://127.0.0.1:1", "--gpu-device", "cuda"), 2, "--gpu-device chooses a device"),
           (("--cluster", "tcp://127.0.0.1:99999"), 2, "port 99999 is out of range"),
           (("--cluster", "tcp://127.0.0.1:1", "--cluster-gpu", "!!!"), 2, "names no GPU model"),
           (("--cluster-wait", "5"), 2, "give --cluster"),
           (("--cluster", "tcp://127.0.0.1:1", "--cluster-wait", "-1"), 2, "cluster-wait=-1")]
    for args, status, words in bad:
        done = run_module("host.compare", "--out", str(tmp_path / "o"), "--targets", "cpu", *args, timeout=60)
        assert done.returncode == status and words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    workers = [(("--gpu", "x"), 2, "not a GPU index"), (("--sim-faults", "drop=0.1"), 2, "needs --sim"),
               (("--gpu", "1"), 2, "give --gpu-device cuda too"),
               (("--gpu-device", "fake", "--gpu", "1"), 2, "give --gpu-device cuda too"),
               (("--serial", "/dev/ttyACM0", "--sim"), 2, "--serial and --sim both given"),
               (("--sim", "--sim-faults", "drop=2"), 2, "--sim-faults"),
               (("--board", "/dev/ttyACM0"), 2, "--board"), (("--fake-gpu",), 2, "--fake-gpu"),
               (("--scheduler", "nowhere"), 2, "--scheduler 'nowhere' is not a scheduler address"),
               (("--scheduler", "wss://127.0.0.1:1"), 2, "--scheduler wss://127.0.0.1:1: wss:// needs TLS"),
               (("--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "2"), 1, "not reached within 2 s")]
    if gpu_missing():
        workers.append((("--scheduler", "tcp://127.0.0.1:1", "--gpu-device", "cuda"), 1, "gpu: "))
    for args, status, words in workers:
        done = run_module("host.cluster", "worker", *args, timeout=120)
        assert done.returncode == status and words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr


def test_a_local_sweep_never_imports_dask():
    code = ("import sys, host.compare; host.compare.main(['--targets', 'cpu', '--seq', '1', '--dim', '1', '--heads', "
            "'1', '--causal', '0', '--out', sys.argv[1]]); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dask', 'distributed')))")
    out = ROOT / ".cache" / "test-local-no-dask"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


def test_resources_name_gpu_models_and_workers_own_their_device_settings():
    assert model_resource("gpu", "NVIDIA H200") == "gpu-nvidia-h200"
    assert model_resource("gpu", "NVIDIA GeForce RTX 4090") == "gpu-nvidia-geforce-rtx-4090"
    assert model_resource("gpu", "???") == "gpu"
    from kernels.target import Settings as GpuSettings
    from kernels.target import model
    from mcu.target import Settings as BoardSettings

    assert model(GpuSettings(device="fake")) == "fake GPU", "the target names its model; no description is parsed"

    worker = KbenchWorker({"gpu": GpuSettings(device="fake"), "mcu": BoardSettings(sim=True)})
    sweep_gpu = GpuSettings(device="cuda", dtypes=("float16",), tile=(64, 32))
    assert worker.settings_for("gpu", sweep_gpu) == GpuSettings(device="fake", dtypes=("float16",), tile=(64, 32))
    assert worker.settings_for("mcu", BoardSettings()) == BoardSettings(sim=True)
    assert worker.settings_for("cpu", "the cpu's settings") == "the cpu's settings"
    assert worker.resources() == {"gpu": 1, "stm32f407": 1}, "before open: no model resource yet"
    with pytest.raises(ValueError, match="'cpu'"):
        KbenchWorker({"cpu": None})


def test_a_worker_owns_what_the_targets_device_options_name():
    """The worker's flags are the targets' own (their CLUSTER declarations); a device is owned when one is given."""
    from kernels.target import Settings as GpuSettings
    from mcu.target import Settings as BoardSettings

    parser = build_parser()

    def owned(*argv: str) -> dict:
        return owned_devices(parser.parse_args(["worker", *argv]))

    assert owned() == {}
    assert owned("--sim", "--sim-faults", "drop=0.1") == {"mcu": BoardSettings(sim=True, sim_faults="drop=0.1")}
    assert owned("--serial", "/dev/ttyACM0", "--baud", "9600") == {"mcu": BoardSettings(serial="/dev/ttyACM0",
                                                                                         baud=9600)}
    assert owned("--gpu-device", "fake") == {"gpu": GpuSettings(device="fake")}
    assert owned("--gpu-device", "cuda", "--gpu", "1") == {"gpu": GpuSettings(device="cuda")}
    both = owned("--gpu-device", "fake", "--sim")
    assert set(both) == {"gpu", "mcu"} and default_name(both).endswith(f"-gpu-mcu-{os.getpid()}")


def test_no_sweep_module_names_a_target_a_field_or_a_resource():
    """host/sweep's cluster code reads the targets' declarations: no target, field or resource is spelled there."""
    import ast

    named = {"cpu", "gpu", "mcu", "asic", "stm32f407", "serial", "sim", "sim_faults", "baud", "device", "--serial",
             "--sim", "--sim-faults", "--baud", "--gpu-device", "--gpu", "cuda", "fake"}
    for name in ("worker.py", "cluster.py", "nodes.py"):
        tree = ast.parse((ROOT / "host" / "sweep" / name).read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                   and isinstance(node.value, str) and id(node) not in docstrings}
        assert not strings & named, (name, strings & named)
