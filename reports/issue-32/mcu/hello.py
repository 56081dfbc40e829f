"""Print the HELLO of a freshly deployed twin (protocol, server, q15attn, free heap, largest block): the figures the
planner plans from. Run from the repository root: .venv/bin/python reports/issue-32/mcu/hello.py"""

from mcu.deploy import deploy
from mcu.link import BoardLink
from mcu.twin_process import start_twin
with start_twin() as twin:
    deploy(twin.port, 115200, say=lambda line: None)
    with BoardLink(twin.port) as link:
        h = link.hello
        print(f"HELLO: protocol {h.protocol}, server {h.server_version}, q15attn {h.module_version}, heap_free "
              f"{h.heap_free} B, largest_block {h.largest_block} B, reserve {h.reserve} B, heap_total {h.heap_total} B")
