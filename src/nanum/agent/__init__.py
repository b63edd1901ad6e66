"""The node agent: discovers GPUs, runs the jobs the server assigns to this node, and reports back.

`gpus` finds the GPUs (NVML or simulated), `executor` launches and stops job processes and remembers them in a
state directory, and `agent` is the heartbeat loop that reconciles the node with the server's desired list.
"""
