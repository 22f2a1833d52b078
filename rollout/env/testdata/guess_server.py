#!/usr/bin/python3
"""A reference environment server for rlnode's http environment.

It speaks OpenEnv's simulation protocol (POST /reset, POST /step,
GET /state, GET /health; bodies of openenv-core 0.2) with the observation
and action fields rlnode reads, and holds many episodes at once, keyed by
episode_id. Python 3 standard library only.

The game: find a hidden number from 1 to 16 within 6 guesses; each wrong
guess is answered "higher" or "lower". Action: guess(n). Rewards: +1 for
the right guess (done, outcome solved), -0.1 for a wrong one, -0.5 for an
invalid action; the 6th wrong guess ends the episode (outcome step_limit).

Tasks: "train" and "heldout" draw the number from the seed (train: numbers
not divisible by 4, heldout: those divisible by 4); an integer 1..16 is
the number itself. Tasks "fault:MODE" misbehave on /step, for tests:
malformed, nan, huge, hang, status500, noobs, badname, badinvalid
(metadata.invalid not a string), redirect, flaky (503 once, then fine).

Run: python3 guess_server.py [--port N] [--step-reward R]. It prints
"listening on http://127.0.0.1:PORT" once it accepts connections.
--step-reward R answers every step of every task with reward R (a hostile
server for tests: 1e308 on each of two steps sums past the largest float).
"""

import argparse
import json
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOW, HIGH, GUESSES = 1, 16, 6
MAX_BODY = 64 * 1024
MAX_EPISODES = 4096
ACTIONS = [{"name": "guess", "description": "guess the hidden number", "param": "n"}]

lock = threading.Lock()
episodes = OrderedDict()  # episode_id -> dict
flaky_seen = set()
step_reward = None  # --step-reward: every step's reward, when set


def draw(seed, task):
    pool = [n for n in range(LOW, HIGH + 1) if (n % 4 == 0) == (task == "heldout")]
    return pool[(seed * 2654435761) % len(pool)]


def reset(body):
    seed, eid, task = body.get("seed", 0), body.get("episode_id"), body.get("task", "train")
    if not isinstance(seed, int) or seed < 0:
        return 422, {"detail": "seed must be an integer >= 0"}
    if not isinstance(eid, str) or not eid or len(eid) > 255:
        return 422, {"detail": "episode_id must be a string of 1 to 255 characters"}
    fault = ""
    if task in ("train", "heldout"):
        target = draw(seed, task)
    elif isinstance(task, str) and task.startswith("fault:"):
        fault, target = task[len("fault:"):], 5
    else:
        try:
            target = int(task)
        except (TypeError, ValueError):
            return 422, {"detail": "unknown task %r" % (task,)}
        if not LOW <= target <= HIGH:
            return 422, {"detail": "task %d is outside %d..%d" % (target, LOW, HIGH)}
    ep = {"target": target, "steps": 0, "wrong": 0, "done": False, "fault": fault, "replies": {}}
    with lock:
        episodes[eid] = ep
        episodes.move_to_end(eid)
        while len(episodes) > MAX_EPISODES:
            episodes.popitem(last=False)
    text = "Find the hidden number from %d to %d within %d guesses." % (LOW, HIGH, GUESSES)
    return 200, {"observation": {"text": text, "actions": ACTIONS}, "reward": None, "done": False, "metadata": {}}


def play(ep, action):
    name, param = action.get("name"), action.get("param", "")
    if name != "guess":
        return -0.5, "Invalid action: unknown action %r." % (name,), {"invalid": "unknown action %r" % (name,)}
    try:
        n = int(str(param).strip())
    except ValueError:
        return -0.5, "Invalid action: guess needs an integer.", {"invalid": "guess needs an integer, got %r" % (param,)}
    if n == ep["target"]:
        ep["done"] = True
        return 1.0, "Correct: the number is %d." % n, {"outcome": "solved"}
    ep["wrong"] += 1
    text = "%d is too %s." % (n, "low; guess higher" if n < ep["target"] else "high; guess lower")
    if ep["wrong"] >= GUESSES:
        ep["done"] = True
        return -0.1, text + " No guesses left.", {"outcome": "step_limit"}
    return -0.1, text + " %d guesses left." % (GUESSES - ep["wrong"]), {}


def step(body):
    eid, action, rid = body.get("episode_id"), body.get("action"), body.get("request_id")
    if not isinstance(action, dict):
        return 422, {"detail": "action must be an object"}
    with lock:
        ep = episodes.get(eid)
        if ep is None:
            return 404, {"detail": "unknown episode_id %r (reset first)" % (eid,)}
        if rid is not None and rid in ep["replies"]:
            return ep["replies"][rid]
        if ep["done"]:
            return 409, {"detail": "episode %r is done" % (eid,)}
        fault = ep["fault"]
        if fault == "flaky" and eid not in flaky_seen:
            flaky_seen.add(eid)
            return 503, {"detail": "busy, try again"}
        ep["steps"] += 1
        reward, text, meta = play(ep, action)
        reply = (200, {"observation": {"text": text, "actions": [] if ep["done"] else ACTIONS},
                       "reward": reward, "done": ep["done"], "metadata": meta})
        if step_reward is not None:
            reply[1]["reward"] = step_reward
        if fault == "nan":
            reply[1]["reward"] = float("nan")
        elif fault == "noobs":
            del reply[1]["observation"]
        elif fault == "badname":
            reply[1]["observation"]["actions"] = [{"name": "Guess Now"}]
        elif fault == "badinvalid":
            reply[1]["metadata"]["invalid"] = True
        elif fault == "status500":
            reply = (500, {"detail": "the environment crashed"})
        if rid is not None:
            ep["replies"] = {rid: reply}
    return reply


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, *args):
        pass

    def send(self, code, obj, raw=None):
        data = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        u = urlparse(self.path)
        if u.path == "/health":
            return self.send(200, {"status": "healthy"})
        if u.path == "/state":
            eid = parse_qs(u.query).get("episode_id", [""])[0]
            with lock:
                ep = episodes.get(eid)
                if ep is None:
                    return self.send(404, {"detail": "unknown episode_id %r" % eid})
                return self.send(200, {"episode_id": eid, "step_count": ep["steps"]})
        self.send(404, {"detail": "no route %s" % u.path})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            return self.send(413, {"detail": "request over %d bytes" % MAX_BODY})
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return self.send(400, {"detail": "malformed JSON: %s" % e})
        path = urlparse(self.path).path
        if path == "/reset":
            return self.send(*reset(body))
        if path != "/step":
            return self.send(404, {"detail": "no route %s" % path})
        with lock:
            ep = episodes.get(body.get("episode_id"))
            fault = ep["fault"] if ep else ""
        if fault == "malformed":
            return self.send(200, None, raw=b'{"observation": {"text": "half')
        if fault == "huge":
            return self.send(200, None, raw=b'{"observation": {"text": "' + b"x" * (2 << 20) + b'"}}')
        if fault == "hang":
            time.sleep(3600)
        if fault == "redirect":
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:9/step")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send(*step(body))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--step-reward", type=float, default=None)
    args = ap.parse_args()
    global step_reward
    step_reward = args.step_reward
    # A listen backlog of 5 (socketserver's default) drops connection
    # attempts when many episodes connect at once.
    ThreadingHTTPServer.request_queue_size = 256
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
