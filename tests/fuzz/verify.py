import sys, shlex
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Conn
from fuzz import show
c = Conn(int(os.environ.get('CAIRN_PORT', 7411)))
r = Conn(int(os.environ.get('REDIS_PORT', 7412)))
for block in sys.stdin.read().split("\n\n"):
    lines = [l for l in block.strip().splitlines() if l.strip()]
    if not lines: continue
    c.call(["FLUSHALL"]); r.call(["FLUSHALL"])
    print("-----")
    for l in lines:
        cmd = shlex.split(l)
        rv, rraw = r.call(cmd); cv, craw = c.call(cmd)
        mark = "   " if rraw == craw else "!! "
        print(mark + l)
        if rraw == craw:
            print("      both : " + show(rv))
        else:
            print("      redis: " + show(rv)); print("      cairn: " + show(cv))
