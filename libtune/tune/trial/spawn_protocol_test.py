"""The Python half of spawn_protocol_test.cpp: runs python_spawner.py's own codec on the
frames the C++ test gives it and prints what it made of them, as JSON; the C++ test
compares. Run by that test as

    python3 spawn_protocol_test.py SPAWNER_MODULE CASES_JSON [SOCKET_FD]

CASES_JSON: {"requests": [hex body, ...], "words": [int, ...], "answers": [[keeper,
error], ...], "answer_on_socket": [[keeper, error, with_pipes], ...]}. With SOCKET_FD it
also reads every request the C++ side wrote on that socket (read_request until the end)
and then sends those answers on it, the pipes' read ends holding their own names.
Every string is hex of its bytes (JSON cannot carry bytes that are not UTF-8).
"""
import importlib.util
import json
import os
import socket
import sys


def _load(path):
    spec = importlib.util.spec_from_file_location("libtune_spawner_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hex(text):
    return text.encode("utf-8", "surrogateescape").hex()


def _decoded(spawner, body):
    """What decode_request made of a body, in the spec's terms; or how it refused."""
    try:
        argv, env, cwd, (into, join, kill, subreaper), (uid, gid, groups) = spawner.decode_request(body)
    except ValueError as e:
        return {"rejected": "ValueError: %s" % e}
    except Exception as e:  # noqa: B902 (any other exception: not the spawner's EINVAL)
        return {"raised": "%s: %s" % (type(e).__name__, e)}
    return {"argv": [_hex(a) for a in argv], "env": [[_hex(k), _hex(v)] for k, v in env.items()],
            "cwd": _hex(cwd), "into": _hex(into), "join": [_hex(j) for j in join], "kill": _hex(kill),
            "subreaper": subreaper, "uid": uid, "gid": gid, "groups": groups}


def _answer_with_pipes(spawner, sock, keeper, error):
    reads = []
    for name in spawner.CHANNELS:
        r, w = os.pipe()
        os.write(w, name.encode())
        os.close(w)
        reads.append(r)
    spawner.send_answer(sock, keeper, error, reads)
    for r in reads:
        os.close(r)


def _on_socket(spawner, fd, answers):
    sock = socket.socket(fileno=fd)
    got = []
    while True:
        body = spawner.read_request(sock)
        if body is None:
            break
        got.append(_decoded(spawner, body))
    for keeper, error, with_pipes in answers:
        if with_pipes:
            _answer_with_pipes(spawner, sock, keeper, error)
        else:
            spawner.send_answer(sock, keeper, error, [])
    sock.close()
    return got


def main():
    spawner = _load(sys.argv[1])
    with open(sys.argv[2]) as f:
        cases = json.load(f)
    out = {
        "requests": [_decoded(spawner, bytes.fromhex(b)) for b in cases.get("requests", [])],
        "words": [spawner.encode_word(v).hex() for v in cases.get("words", [])],
        "answers": [spawner.encode_answer(k, e).hex() for k, e in cases.get("answers", [])],
    }
    if len(sys.argv) > 3:
        out["socket_requests"] = _on_socket(spawner, int(sys.argv[3]), cases.get("answer_on_socket", []))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
