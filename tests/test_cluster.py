"""keyspan on a real Spark standalone cluster (master + 2 workers of 1 core each on loopback, one per
test session, from PySpark's own ``spark-class``) with S3 (moto's server on loopback) as the shared
checkpoint, savepoint, input and output storage:

* a keyed job submitted with ``spark-submit --master spark://…`` reaches the master, runs tasks on both
  executors, checkpoints to S3 from the executors, and writes exactly the expected output;
* ``keyspan run -d --master … --conf …`` then ``keyspan rescale -p 1 --restart``: a savepoint on the cluster is
  restored at another parallelism with the run's original options, arguments and code folder;
* a driver-local ``file://`` checkpoint location is refused on a multi-host master.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest

pytest.importorskip("moto.server")
import moto.server as moto_server  # noqa: E402

from keyspan.checkpoint.metadata import MetadataStore, default_url  # noqa: E402

from spark_cluster import free_port  # noqa: E402

JOBS = Path(__file__).parent / "jobs"
pytestmark = pytest.mark.timeout(1500)  # driver JVMs start slowly on a loaded 2-core machine
KEY, SECRET, REGION, BUCKET = "testing", "testing", "us-east-1", "keyspan-cluster"


@pytest.fixture(scope="module")
def s3():
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                          region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client, endpoint
    finally:
        server.stop()


def _aws(endpoint: str) -> dict:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": REGION}


def _spark_conf(endpoint: str, events: Path | None = None) -> list[str]:
    """What a cluster user passes: S3 settings for the executors' environment, executor size, and
    "wait for both executors" so the first epoch's tasks spread over the cluster."""
    conf = [f"spark.executorEnv.{k}={v}" for k, v in _aws(endpoint).items()]
    conf += ["spark.executor.memory=512m", "spark.scheduler.minRegisteredResourcesRatio=1.0",
             "spark.scheduler.maxRegisteredResourcesWaitingTime=60s", "spark.ui.enabled=false"]
    if events is not None:
        events.mkdir(exist_ok=True)
        conf += ["spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{events}",
                 "spark.eventLog.compress=false", "spark.eventLog.rolling.enabled=false"]
    return conf


def _driver_env(tmp: Path, endpoint: str, prefix: str, **extra) -> dict:
    env = dict(os.environ, **_aws(endpoint), SPARK_LOCAL_IP="127.0.0.1", KEYSPAN_WORKDIR=str(tmp / ".keyspan"),
               KEYSPAN_CHECKPOINT_DIR=f"s3://{BUCKET}/{prefix}/checkpoints",
               KEYSPAN_SAVEPOINT_DIR=f"s3://{BUCKET}/{prefix}/savepoints",
               CLUSTER_JOB_INPUT=f"s3://{BUCKET}/{prefix}/in", CLUSTER_JOB_OUTPUT=f"s3://{BUCKET}/{prefix}/out",
               PYSPARK_PYTHON=sys.executable, **extra)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "PYSPARK_GATEWAY_PORT"):
        env.pop(name, None)
    return env


def _put_lines(client, prefix: str, name: str, records: list[tuple[str, int]]) -> None:
    body = "".join(f"{k},{v}\n" for k, v in records).encode()
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/in/{name}", Body=body)


def _output(client, prefix: str) -> list[str]:
    lines = []
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/out/")
    for obj in listing.get("Contents", []):
        if "/.staging/" not in obj["Key"]:
            lines += client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read().decode().splitlines()
    return sorted(lines)


def _expected(records: list[tuple[str, int]]) -> list[str]:
    counts: dict = {}
    out = []
    for k, _ in records:
        counts[k] = counts.get(k, 0) + 1
        out.append(f"{k},{counts[k]}")
    return sorted(out)


def _records(start: int, n: int) -> list[tuple[str, int]]:
    return [(f"key-{i % 23:02d}", i) for i in range(start, start + n)]


def _executors_with_tasks(events: Path) -> set[str]:
    found = set()
    for path in glob.glob(str(events / "**" / "*"), recursive=True):
        if os.path.isdir(path):
            continue
        with open(path) as f:
            for line in f:
                event = json.loads(line)
                if event.get("Event") == "SparkListenerTaskEnd":
                    found.add(event["Task Info"]["Executor ID"])
    return found


def test_spark_submit_runs_on_both_executors_with_s3_checkpoints(spark_cluster, s3, tmp_path):
    client, endpoint = s3
    prefix = f"submit-{uuid.uuid4().hex[:8]}"
    records = _records(0, 900)
    _put_lines(client, prefix, "000.txt", records[:450])
    _put_lines(client, prefix, "001.txt", records[450:])
    events = tmp_path / "events"
    cmd = [os.path.join(spark_cluster.spark_home, "bin", "spark-submit"), "--master", spark_cluster.master_url,
           "--name", f"keyspan-{prefix}", "--py-files", str(JOBS / "cluster_job_lib.py")]
    for item in _spark_conf(endpoint, events):
        cmd += ["--conf", item]
    done = subprocess.run(cmd + [str(JOBS / "cluster_job.py")], env=_driver_env(tmp_path, endpoint, prefix),
                          capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-4000:]

    apps = spark_cluster.state()["completedapps"]  # it reached the master (no silent local mode)
    assert any(a["name"] == f"keyspan-{prefix}" for a in apps), [a["name"] for a in apps]
    assert _executors_with_tasks(events) == {"0", "1"}  # both executors ran tasks, the driver none
    assert _output(client, prefix) == _expected(records)
    state_files = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/checkpoints/cluster-count/state/count/")
    assert state_files.get("KeyCount", 0) > 0  # the executors wrote the keyed state to S3


def _keyspan(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keyspan", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(JOBS.parent.parent))


def _wait(what: str, ready, timeout: float = 240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(what)


def test_detached_run_and_rescale_on_the_cluster(spark_cluster, s3, tmp_path):
    client, endpoint = s3
    prefix = f"rescale-{uuid.uuid4().hex[:8]}"
    env = _driver_env(tmp_path, endpoint, prefix, CLUSTER_JOB_CONTINUOUS="1")
    workdir = env["KEYSPAN_WORKDIR"]
    first, second = _records(0, 600), _records(600, 600)
    _put_lines(client, prefix, "000.txt", first)
    conf = []
    for item in _spark_conf(endpoint):
        conf += ["--conf", item]
    started = _keyspan("run", "-d", str(JOBS / "cluster_job.py"), "--master", spark_cluster.master_url, *conf,
                       "-p", "2", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "job cluster-count started" in started.stdout and "log: " + workdir in started.stdout, started.stdout
    log = started.stdout.split("log: ", 1)[1].strip()
    try:
        _wait("first file processed", lambda: _output(client, prefix) == _expected(first))
        store = MetadataStore(default_url(workdir))
        _wait("driver API up", lambda: (store.get_job("cluster-count") or {}).get("api_url"))
        rescaled = _keyspan("rescale", "cluster-count", "-p", "1", "--restart", "--workdir", workdir, env=env)
        assert rescaled.returncode == 0, rescaled.stdout + rescaled.stderr + Path(log).read_text()[-3000:]
        assert store.latest_run("cluster-count")["parallelism"] == 1
        restored = [c["restored_from"] for c in store.list_checkpoints("cluster-count")]
        assert any((r or "").startswith(f"savepoint:s3://{BUCKET}/{prefix}/savepoints/") for r in restored), restored
        _put_lines(client, prefix, "001.txt", second)
        _wait("second file processed", lambda: _output(client, prefix) == _expected(first + second))
        # the restarted driver kept --master and --conf: its application runs on the cluster
        apps = spark_cluster.state()["activeapps"]
        assert [a["name"] for a in apps] == ["keyspan"] and apps[0]["cores"] >= 1, apps
    finally:
        _keyspan("stop", "cluster-count", "--workdir", workdir, env=env)
    assert _output(client, prefix) == _expected(first + second)


def test_driver_local_checkpoints_are_refused_on_a_cluster(spark_cluster, s3, tmp_path):
    client, endpoint = s3
    prefix = f"refuse-{uuid.uuid4().hex[:8]}"
    env = _driver_env(tmp_path, endpoint, prefix)
    del env["KEYSPAN_CHECKPOINT_DIR"]
    _put_lines(client, prefix, "000.txt", _records(0, 10))
    done = _keyspan("run", str(JOBS / "cluster_job.py"), "--master", spark_cluster.master_url, "--no-spark-ui",
                    "--conf", "spark.executor.memory=512m", env=env)
    message = " ".join(done.stderr.split())  # the terminal wraps long lines
    assert done.returncode == 1, message[-2000:]
    assert "driver's local disk" in message and "--allow-local-storage" in message, message[-2000:]
    assert _output(client, prefix) == []


def test_chaos_kills_lose_and_double_nothing(spark_cluster, tmp_path):
    """The slim version of bench/cluster_chaos.py: one kill of each kind (a Python worker, an executor
    JVM, a whole worker daemon, the driver) while input keeps arriving; every kill is followed by a new
    committed checkpoint, and the output has no line lost and none doubled."""
    sys.path.insert(0, str(JOBS.parent.parent / "bench"))
    from cluster_chaos import KINDS, Chaos

    result = Chaos(spark_cluster, str(tmp_path), kills=len(KINDS), seed=3, records_per_file=60).run()
    kinds = [k["kind"] for k in result["kills"]]
    assert len(kinds) == len(KINDS) and {"driver", "worker daemon", "executor JVM"} <= set(kinds), kinds
    assert all(k["recovery_s"] is not None for k in result["kills"]), result["kills"]
    assert result["driver_starts"] >= 2  # the driver kill was followed by a re-run
    assert result["records"] > 0 and result["lost"] == 0 and result["duplicated"] == 0, result
