"""Plays a rank's part of a log back with its timing, as the job under watch: the
lines of REPLAY_DIR/rank<RANK>.txt, each "+MS text" (MS after the previous line),
printed to stdout; {host} and {pid} filled in. Then sleeps REPLAY_SLEEP seconds and
exits REPLAY_EXIT."""
import os
import socket
import sys
import time

rank = os.environ["RANK"]
path = os.path.join(os.environ["REPLAY_DIR"], f"rank{rank}.txt")
host, pid = socket.gethostname(), os.getpid()
if os.path.exists(path):
    with open(path) as f:
        for raw in f:
            delay, _, text = raw.rstrip("\n").partition(" ")
            time.sleep(int(delay.lstrip("+")) / 1000)
            print(text.replace("{host}", host).replace("{pid}", str(pid)), flush=True)
time.sleep(float(os.environ.get("REPLAY_SLEEP", "0")))
sys.exit(int(os.environ.get("REPLAY_EXIT", "0")))
