# The sandbox harness: run by /usr/bin/python3 -I inside the sandbox, with
# the limits (JSON) as its one argument and the job (JSON) on stdin.
#
# It is two processes. The judge lowers the resource limits (the code
# cannot raise them again), makes itself undumpable (so no process of its
# uid can read its memory or reopen its files through /proc) and forks the
# runner before it reads the job. The runner drops stdin and the report
# pipe, and runs the setup and the program. The judge reads the job, runs
# the setup in a namespace of its own, and then runs each test itself:
# names the test takes from the program resolve to proxies, and every use
# of one (a call, an attribute, iteration) is a request to the runner,
# whose answer comes back as plain data (numbers, strings, bytes, lists,
# tuples, dicts, sets, None). So the comparisons a test makes run in a
# process the program never ran in, against values the program never saw:
# the program cannot rewrite the tests, the judge's report, or what == and
# assert mean. The runner's objects that are not plain data come back as
# handles that can be called, read, iterated and converted (bool, str,
# int, float), but not compared. The judge reports on fd 3, one line per step:
# "<nonce> <json list>". A failing or hanging test does not hide the
# others: each runs on its own, under its own alarm.
import builtins
import importlib
import json
import numbers
import os
import resource
import signal
import sys
import time

MAX_REPLY_BYTES = 16 << 20  # one value from the runner
MAX_ITEMS = 1 << 20  # items of one iteration of a handle
CONVERSIONS = {"bool": bool, "str": str, "int": int, "index": lambda v: __import__("operator").index(v),
               "float": float, "complex": complex}


class TestTimeout(BaseException):
    pass


def _rlnode_harness():
    lim = json.loads(sys.argv[1])
    del sys.argv[1:]  # the program sees the argv of python3 -c, as before

    def setlimit(which, value):
        if value > 0:
            resource.setrlimit(which, (value, value))

    setlimit(resource.RLIMIT_AS, lim["memory_bytes"])
    setlimit(resource.RLIMIT_FSIZE, lim["file_bytes"])
    setlimit(resource.RLIMIT_NOFILE, 64)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim["cpu_seconds"] > 0:
        # SIGXCPU at the soft limit, SIGKILL a second later.
        resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_seconds"], lim["cpu_seconds"] + 1))
    import ctypes

    # Undumpable: the runner, of the same uid, can neither read the
    # judge's memory nor open its stdin or report pipe through /proc.
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")

    to_runner_r, to_runner_w = os.pipe()
    from_runner_r, from_runner_w = os.pipe()
    # The process limit comes after the fork: where it counts all of a
    # user's processes (no user namespace, not root), the harness's own
    # fork must not need room the program would not need.
    pid = os.fork()
    setlimit(resource.RLIMIT_NPROC, lim["processes"])
    if pid == 0:
        try:
            os.close(to_runner_w)
            os.close(from_runner_r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.close(3)
            runner(to_runner_r, from_runner_w, lim)
        finally:
            os._exit(0)
    os.close(to_runner_r)
    os.close(from_runner_w)
    judge(pid, os.fdopen(to_runner_w, "wb"), os.fdopen(from_runner_r, "rb"), lim)


def describe(e):
    if isinstance(e, ProgramError):
        return str(e)
    msg = str(e)
    name = type(e).__name__
    return name + (": " + msg[:300] if msg else "")


# Values cross between the processes as JSON: every value is a list whose
# first item says its type.


def encode(v, handles):
    if v is None:
        return ["n"]
    if isinstance(v, bool):
        return ["b", bool(v)]
    if isinstance(v, int):
        return ["i", hex(int(v))]  # no digit limit in base 16
    if handles is not None and isinstance(v, numbers.Integral):
        return ["i", hex(int(v))]  # numpy's integers compare as ints did
    if isinstance(v, float):
        return ["f", repr(float(v))]
    if isinstance(v, complex):
        return ["c", repr(v.real), repr(v.imag)]
    if isinstance(v, str):
        return ["s", str(v)]
    if isinstance(v, (bytes, bytearray)):
        return ["y", bytes(v).hex()]
    if isinstance(v, tuple):
        return ["t", [encode(x, handles) for x in v]]
    if isinstance(v, list):
        return ["l", [encode(x, handles) for x in v]]
    if isinstance(v, dict):
        return ["d", [[encode(k, handles), encode(x, handles)] for k, x in v.items()]]
    if isinstance(v, frozenset):
        return ["F", [encode(x, handles) for x in v]]
    if isinstance(v, set):
        return ["S", [encode(x, handles) for x in v]]
    if isinstance(v, Handle):
        return ["h", v._id]
    if handles is None:
        # The judge's side: a function or class a module names (abs, len,
        # math.sqrt) goes by that name; nothing else of the judge's does.
        ref = named(v)
        if ref is None:
            raise TypeError("a %s of the test's cannot be passed to the program: only plain data and "
                            "functions and classes a module names (abs, math.sqrt)" % type(v).__name__)
        return ["r", ref[0], ref[1]]
    handles.append(v)
    return ["h", len(handles) - 1, type(v).__name__]


def named(v):
    """(module, qualified name) that import to v itself, or None."""
    module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    try:
        return (module, qualname) if by_name(module, qualname) is v else None
    except Exception:
        return None


def by_name(module, qualname):
    v = importlib.import_module(module)
    for part in qualname.split("."):
        v = getattr(v, part)
    return v


def decode(e, handle, refs=False):
    """The value e encodes; handle makes a handle's, and refs (the runner's
    side only) lets functions and classes come by name."""
    tag = e[0]
    if tag == "n":
        return None
    if tag == "b":
        return e[1] is True
    if tag == "i":
        return int(e[1], 16)
    if tag == "f":
        return float(e[1])
    if tag == "c":
        return complex(float(e[1]), float(e[2]))
    if tag == "s":
        if type(e[1]) is not str:
            raise ValueError("bad string")
        return e[1]
    if tag == "y":
        return bytes.fromhex(e[1])
    if tag == "t":
        return tuple(decode(x, handle, refs) for x in e[1])
    if tag == "l":
        return [decode(x, handle, refs) for x in e[1]]
    if tag == "d":
        return {decode(k, handle, refs): decode(x, handle, refs) for k, x in e[1]}
    if tag == "F":
        return frozenset(decode(x, handle, refs) for x in e[1])
    if tag == "S":
        return set(decode(x, handle, refs) for x in e[1])
    if tag == "h":
        return handle(e)
    if tag == "r" and refs and len(e) == 3:
        return by_name(str(e[1]), str(e[2]))
    raise ValueError("unknown value tag %r" % (tag,))


def send(f, msg):
    f.write(json.dumps(msg).encode() + b"\n")
    f.flush()


def runner(rfd, wfd, lim):
    """Runs the setup and the program and answers the judge's requests,
    each under the alarm; what it answers is untrusted."""
    requests = os.fdopen(rfd, "rb")
    replies = os.fdopen(wfd, "wb")
    handles = []

    def on_alarm(signum, frame):
        raise TestTimeout("test ran longer than %g s" % lim["test_seconds"])

    signal.signal(signal.SIGALRM, on_alarm)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}

    def from_judge(e):
        if len(e) != 2 or type(e[1]) is not int or not 0 <= e[1] < len(handles):
            raise ValueError("bad handle")
        return handles[e[1]]

    while True:
        line = requests.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            op, seconds = req[0], req[1]
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
            if op == "run":
                exec(compile(req[2], "<" + req[3] + ">", "exec"), namespace)
                out = ["ok"]
            elif op == "global":
                if req[2] not in namespace:
                    out = ["missing"]
                else:
                    v = namespace[req[2]]
                    if type(v) is type(os):
                        out = ["module", str(getattr(v, "__name__", ""))]
                    else:
                        out = ["value", encode(v, handles)]
            elif op == "call":
                fn = from_judge(["h", req[2]])
                args = [decode(a, from_judge, True) for a in req[3]]
                kwargs = {str(k): decode(a, from_judge, True) for k, a in req[4]}
                out = ["value", encode(fn(*args, **kwargs), handles)]
            elif op == "getattr":
                out = ["value", encode(getattr(from_judge(["h", req[2]]), req[3]), handles)]
            elif op == "getitem":
                out = ["value", encode(from_judge(["h", req[2]])[decode(req[3], from_judge, True)], handles)]
            elif op == "convert":
                v = from_judge(["h", req[2]])
                kind = req[3]
                if kind == "format":
                    v = format(v, str(req[4]))
                elif kind in CONVERSIONS:
                    v = CONVERSIONS[kind](v)
                else:
                    raise ValueError("unknown conversion %r" % (kind,))
                out = ["value", encode(v, handles)]
            elif op == "len":
                out = ["value", encode(len(from_judge(["h", req[2]])), handles)]
            elif op == "iter":
                items = []
                for x in from_judge(["h", req[2]]):
                    items.append(x)
                    if len(items) > MAX_ITEMS:
                        raise ValueError("more than %d items" % MAX_ITEMS)
                out = ["value", encode(items, handles)]
            else:
                raise ValueError("unknown request %r" % (op,))
            signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            out = ["error", type(e).__name__, str(e)[:300], isinstance(e, AssertionError)]
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        send(replies, out)


class RunnerGone(Exception):
    """The runner exited or was killed (status from waitpid), or the judge
    killed it (status None)."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


class ProgramError(Exception):
    """An exception the program raised while answering the judge; its
    message is the exception's type and message, kind the type's name."""

    def __init__(self, kind, message):
        super().__init__(kind + (": " + message if message else ""))
        self.kind = kind


class Handle:
    """A value of the program's that is not plain data: it can be called,
    read, iterated and converted to plain data (each a request to the
    runner), not compared."""

    __slots__ = ("_id", "_type", "_judge")

    def __init__(self, judge, hid, typename):
        self._id, self._type, self._judge = hid, typename, judge

    def __call__(self, *args, **kwargs):
        return self._judge.ask("call", self._id, [encode(a, None) for a in args],
                               [[str(k), encode(a, None)] for k, a in kwargs.items()])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._judge.ask("getattr", self._id, name)

    def __getitem__(self, key):
        return self._judge.ask("getitem", self._id, encode(key, None))

    def __len__(self):
        try:
            return self._judge.ask("len", self._id)
        except ProgramError as e:
            if e.kind == "TypeError":
                raise TypeError(str(e)) from None  # list() and the like go on without a length
            raise

    def __iter__(self):
        return iter(self._judge.ask("iter", self._id))

    def __bool__(self):
        # The program could as well have answered True or False: its own
        # truth is no secret of the test's.
        return self._judge.ask("convert", self._id, "bool") is True

    # Likewise a conversion to plain data: the program could have answered
    # that value itself, and the judge compares it.
    def __str__(self):
        return self._judge.ask("convert", self._id, "str")

    def __format__(self, spec):
        return self._judge.ask("convert", self._id, "format", str(spec))

    def __int__(self):
        return self._judge.ask("convert", self._id, "int")

    def __index__(self):
        return self._judge.ask("convert", self._id, "index")

    def __float__(self):
        return self._judge.ask("convert", self._id, "float")

    def __complex__(self):
        return self._judge.ask("convert", self._id, "complex")

    def _opaque(self, *args):
        raise TypeError("the program's %s is not plain data (numbers, strings, bytes, lists, tuples, dicts, sets, "
                        "None): the verifier does not compare it" % self._type)

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _opaque
    __hash__ = object.__hash__

    def __repr__(self):
        return "<the program's %s>" % self._type


class Judge:
    """The judge's side of the requests to the runner."""

    def __init__(self, pid, requests, replies, seconds):
        self.pid, self.requests, self.replies, self.seconds = pid, requests, replies, seconds
        self.deadline = 0.0  # of the current step, time.monotonic()
        self.in_request = False
        self.alarm_missed = False  # the step's alarm came during a request
        self.gone = None

    def request(self, op, *args):
        """Sends one request and returns the runner's answer; raises the
        program's exception when it raised one."""
        if self.gone is not None:
            raise self.gone
        self.in_request = True
        try:
            send(self.requests, [op, self.deadline - time.monotonic()] + list(args))
            line = self.replies.readline(MAX_REPLY_BYTES + 1)
        except OSError:
            line = b""
        finally:
            self.in_request = False
        if line and not line.endswith(b"\n"):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.gone = RunnerGone("the program answered with more than %d bytes" % MAX_REPLY_BYTES, None)
        elif not line:
            _, status = os.waitpid(self.pid, 0)
            self.gone = RunnerGone("the program's process ended", status)
        if self.gone is not None:
            raise self.gone
        if self.alarm_missed:
            raise TestTimeout("test ran longer than %g s" % self.seconds)
        out = json.loads(line)
        if out[0] == "error":
            if out[3] is True:
                raise AssertionError(str(out[2]))
            raise ProgramError(str(out[1]), str(out[2]))
        return out

    def value(self, out):
        if out[0] != "value":
            raise ValueError("unknown answer %r" % (out[0],))
        return decode(out[1], lambda e: Handle(self, int(e[1]), str(e[2])))

    def ask(self, op, *args):
        return self.value(self.request(op, *args))

    def resolve(self, name):
        """A global of the program's: a module (the judge imports its own
        copy), a value, or KeyError."""
        out = self.request("global", name)
        if out[0] == "missing":
            raise KeyError(name)
        if out[0] == "module":
            return importlib.import_module(str(out[1]))
        return self.value(out)


def judge(pid, requests, replies, lim):
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

    say("limits")
    j = Judge(pid, requests, replies, lim["test_seconds"])

    def on_alarm(signum, frame):
        if j.in_request:
            j.alarm_missed = True  # the runner has an alarm of its own; the judge stops at the answer
        else:
            raise TestTimeout("test ran longer than %g s" % lim["test_seconds"])

    signal.signal(signal.SIGALRM, on_alarm)

    def end_like_the_runner():
        # The runner exited or died before the tests ended: the judge ends
        # the same way, so the sandbox says why (CPU limit, os._exit...).
        st = j.gone.status
        if st is None:
            return
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        if os.WIFSIGNALED(st):
            sig = os.WTERMSIG(st)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            time.sleep(1)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(st))

    class Names(dict):
        """A test's globals: its own, the setup's, builtins, then the
        program's."""

        def __missing__(self, name):
            if hasattr(builtins, name):
                raise KeyError(name)
            return j.resolve(name)

    def step(stage, src, run):
        j.deadline = time.monotonic() + lim["test_seconds"]
        j.alarm_missed = False
        signal.setitimer(signal.ITIMER_REAL, lim["test_seconds"])
        try:
            run(src)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                sys.stdout.flush()
            except BaseException:
                pass

    setup_names = {"__name__": "__main__", "__builtins__": builtins}

    def run_setup(src):
        # The setup is the reference's: the judge runs it too, and the
        # tests see its names.
        exec(compile(src, "<setup>", "exec"), setup_names)
        j.request("run", src, "setup")

    def run_program(src):
        j.request("run", src, "program")

    for stage, run in (("setup", run_setup), ("program", run_program)):
        src = job.get(stage) or ""
        if not src:
            continue
        try:
            step(stage, src, run)
        except RunnerGone as e:
            end_like_the_runner()
            say(stage, "error", describe(e))
            return
        except BaseException as e:
            say(stage, "error", describe(e))
            return
    say("program", "ok", "")
    names = Names(setup_names)  # what a test assigns, the next ones see
    for i, test in enumerate(job.get("tests") or []):
        try:
            step("test", test, lambda src: exec(compile(src, "<test %d>" % (i + 1), "exec"), names))
            say("test", i, "pass", "")
        except RunnerGone as e:
            end_like_the_runner()
            say("test", i, "error", describe(e))
        except AssertionError as e:
            say("test", i, "fail", describe(e))
        except BaseException as e:
            say("test", i, "error", describe(e))
    say("done")


_rlnode_harness()
