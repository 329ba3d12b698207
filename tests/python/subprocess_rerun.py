"""Reruns some of a test module's tests in a fresh pytest process with environment switches set: the library
reads its profiling and test switches (HOPPERKIT_*) once per process, so a switched run needs a process of its
own. The switched tests see the caller's environment plus `env`; pass HK_TEST_SEED in `env` to keep the run's
seed (a failure then replays with it)."""
import os
import subprocess
import sys


def rerun_with_env(test_file, k_expr, env, timeout=100):
    """pytest -q -x on `test_file` -k `k_expr` in a subprocess with `env` added to the environment; the default
    time limit stays within the suite's 120 s per test. Asserts that it exited 0; returns its stdout."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test_file, "-k",
                        k_expr], env=dict(os.environ, **env), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    return r.stdout
