# The sandbox harness: run by /usr/bin/python3 -I inside the sandbox.
# It reads one JSON job from stdin, lowers its own resource limits (they
# cannot be raised again by the code it runs), then executes the setup,
# the program and each test in one namespace, reporting on fd 3 one line
# per step: "<nonce> <json list>". A failing or hanging test does not hide
# the others: each assert runs on its own, under its own alarm.
import json
import os
import resource
import signal
import sys


def _rlnode_harness():
    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    sys.stdin = open(os.devnull)
    report = os.fdopen(3, "w", buffering=1, closefd=False)
    nonce = job["nonce"]

    def say(*parts):
        try:
            report.write(nonce + " " + json.dumps(parts) + "\n")
            report.flush()
        except Exception:
            pass

    lim = job["limits"]

    def setlimit(which, value):
        if value > 0:
            resource.setrlimit(which, (value, value))

    setlimit(resource.RLIMIT_AS, lim["memory_bytes"])
    setlimit(resource.RLIMIT_NPROC, lim["processes"])
    setlimit(resource.RLIMIT_FSIZE, lim["file_bytes"])
    setlimit(resource.RLIMIT_NOFILE, 64)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim["cpu_seconds"] > 0:
        # SIGXCPU at the soft limit, SIGKILL a second later.
        resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_seconds"], lim["cpu_seconds"] + 1))
    say("limits")

    class TestTimeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise TestTimeout("test ran longer than %g s" % lim["test_seconds"])

    signal.signal(signal.SIGALRM, on_alarm)

    def describe(e):
        msg = str(e)
        name = type(e).__name__
        return name + (": " + msg[:300] if msg else "")

    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    for stage in ("setup", "program"):
        src = job.get(stage) or ""
        if not src:
            continue
        try:
            signal.setitimer(signal.ITIMER_REAL, lim["test_seconds"])
            exec(compile(src, "<" + stage + ">", "exec"), namespace)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            say(stage, "error", describe(e))
            return
        finally:
            sys.stdout.flush()
    say("program", "ok", "")
    for i, test in enumerate(job.get("tests") or []):
        try:
            signal.setitimer(signal.ITIMER_REAL, lim["test_seconds"])
            exec(compile(test, "<test %d>" % (i + 1), "exec"), namespace)
            signal.setitimer(signal.ITIMER_REAL, 0)
            say("test", i, "pass", "")
        except AssertionError as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            say("test", i, "fail", describe(e))
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            say("test", i, "error", describe(e))
        finally:
            try:
                sys.stdout.flush()
            except BaseException:
                pass
    say("done")


_rlnode_harness()
