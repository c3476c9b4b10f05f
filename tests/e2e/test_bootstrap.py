"""scripts/bootstrap waits for another package manager instead of failing on its lock.

No network and no real package manager: apt-get is a stand-in (PGD_APT_GET, also first on
PATH) that logs each call and, like apt, fails with "Could not get lock" while the lock file is
held; the lock is a temporary file (PGD_APT_LOCKS) held with a POSIX lock, as apt and dpkg hold
theirs, by a helper process for a few seconds. A package that is surely missing
(PGD_BOOTSTRAP_EXTRA) makes bootstrap call apt-get; --serve skips the Python venv. Safe for CI
(root, Debian) and quick.

With PGD_TEST_APT=1 (root only) one more test holds the real /var/lib/dpkg/lock-frontend for a
few seconds, to check that bootstrap sees a real lock too (apt-get is still the stand-in).
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "scripts" / "bootstrap"
MISSING = "pagoda-test-no-such-package"

pytestmark = pytest.mark.skipif(shutil.which("lslocks") is None or
                                shutil.which("dpkg-query") is None,
                                reason="needs Debian's dpkg-query and util-linux's lslocks")

FAKE_APT = textwrap.dedent("""\
    #!{python}
    import fcntl, json, os, sys, time
    lock = os.environ["FAKE_APT_LOCK"]
    held = False
    try:
        with open(lock, "a") as f:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                held = True
    except PermissionError:
        held = True
    with open(os.environ["FAKE_APT_LOG"], "a") as log:
        log.write(json.dumps({{"t": time.time(), "args": sys.argv[1:], "held": held}}) + "\\n")
    if held:
        print(f"E: Could not get lock {{lock}}. It is held by process 1 (holder)",
              file=sys.stderr)
        sys.exit(100)
    """)

# Holds the lock for argv[2] seconds, or (argv[3], a file) until that file has something in it:
# until apt-get has been called once while held, however slowly a busy machine got there.
HOLDER = textwrap.dedent("""\
    import fcntl, os, sys, time
    f = open(sys.argv[1], "a")
    fcntl.lockf(f, fcntl.LOCK_EX)
    print("locked", flush=True)
    end = time.time() + float(sys.argv[2])
    until = sys.argv[3] if len(sys.argv) > 3 else None
    while time.time() < end:
        if until and os.path.exists(until) and os.path.getsize(until) > 0:
            break
        time.sleep(0.05)
    """)


@pytest.fixture
def fake_apt(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "apt-get"
    fake.write_text(FAKE_APT.format(python=sys.executable))
    fake.chmod(0o755)
    return fake, tmp_path / "apt.log"


def hold(lock, seconds, until=None):
    args = [str(lock), str(seconds)] + ([str(until)] if until else [])
    p = subprocess.Popen([sys.executable, "-c", HOLDER, *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def run_bootstrap(fake, log, lock, locks_env=None, timeout_s=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGD_")}
    env.update({
        "PATH": f"{fake.parent}:{env.get('PATH', '')}",
        "PGD_APT_GET": str(fake),
        "PGD_APT_LOCKS": str(locks_env if locks_env is not None else lock),
        "PGD_APT_LOCK_TIMEOUT": str(timeout_s),
        "PGD_SUDO": "",
        "PGD_BOOTSTRAP_EXTRA": MISSING,
        "FAKE_APT_LOCK": str(lock),
        "FAKE_APT_LOG": str(log),
    })
    t0 = time.time()
    p = subprocess.run([str(BOOTSTRAP), "--serve"], env=env, capture_output=True,
                       text=True, timeout=120)
    return p, t0


def calls(log):
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_waits_for_the_lock_then_installs(fake_apt, tmp_path):
    """While another process holds the lock, bootstrap says so (who holds it) and waits; then
    it updates and installs, with apt's own lock wait on, and never calls apt-get while the
    lock is held."""
    fake, log = fake_apt
    lock = tmp_path / "lock-frontend"
    holder = hold(lock, 2)
    try:
        p, t0 = run_bootstrap(fake, log, lock)
    finally:
        holder.wait(timeout=30)
    released = time.time() - t0  # upper bound of when the lock went
    assert p.returncode == 0, p.stderr
    assert "waiting for another package manager" in p.stderr, p.stderr
    assert f"{holder.pid} (python" in p.stderr and str(lock) in p.stderr, p.stderr
    cs = calls(log)
    assert [c["args"][2] for c in cs] == ["update", "install"], cs
    assert all(not c["held"] for c in cs), cs
    assert all(c["args"][:2] == ["-o", "DPkg::Lock::Timeout=60"] for c in cs), cs
    assert MISSING in cs[1]["args"]
    assert cs[0]["t"] - t0 >= 1.5, (cs[0]["t"] - t0, released)  # not before the holder let go
    assert "installing the serve set's missing Debian packages" in p.stderr


def test_retries_apt_get_update_on_a_lock_it_cannot_see(fake_apt, tmp_path):
    """A lock bootstrap does not watch (apt-get update's lists lock, or no lslocks): apt-get
    fails with "Could not get lock" and bootstrap retries it until it goes through. The lock is
    held until apt-get has met it once (not for a fixed time, which a loaded machine outlasted
    before bootstrap's first call)."""
    fake, log = fake_apt
    lock = tmp_path / "lists-lock"
    holder = hold(lock, 60, until=log)
    try:
        p, _ = run_bootstrap(fake, log, lock, locks_env=tmp_path / "not-this-one")
    finally:
        holder.wait(timeout=30)
    assert p.returncode == 0, p.stderr
    assert "retrying" in p.stderr and "Could not get lock" in p.stderr, p.stderr
    cs = calls(log)
    assert cs[0]["held"] and not cs[-1]["held"], cs
    assert cs[-1]["args"][2] == "install" and MISSING in cs[-1]["args"], cs


def test_gives_up_after_the_timeout(fake_apt, tmp_path):
    """A lock held longer than PGD_APT_LOCK_TIMEOUT: bootstrap fails, saying why, without
    calling apt-get."""
    fake, log = fake_apt
    lock = tmp_path / "lock-frontend"
    holder = hold(lock, 60)  # killed below: held however slowly bootstrap starts
    try:
        p, t0 = run_bootstrap(fake, log, lock, timeout_s=2)
        took = time.time() - t0
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert p.returncode != 0
    assert "gave up after 2s" in p.stderr, p.stderr
    assert calls(log) == []
    assert took < 30  # gave up, long before the holder would have let go


@pytest.mark.skipif(os.environ.get("PGD_TEST_APT") != "1" or os.geteuid() != 0,
                    reason="holds the real dpkg lock: PGD_TEST_APT=1, as root")
def test_sees_the_real_dpkg_lock(fake_apt, tmp_path):
    """The real /var/lib/dpkg/lock-frontend, held for 3 s: bootstrap (default lock list) waits
    for it. apt-get is still the stand-in, so nothing is installed."""
    fake, log = fake_apt
    lock = pathlib.Path("/var/lib/dpkg/lock-frontend")
    holder = hold(lock, 3)
    try:
        p, _ = run_bootstrap(fake, log, lock, locks_env="")  # "": bootstrap's default locks
    finally:
        holder.wait(timeout=30)
    assert p.returncode == 0, p.stderr
    assert "waiting for another package manager" in p.stderr and str(lock) in p.stderr
    assert all(not c["held"] for c in calls(log))
