"""The agent mesh: peer agents' messages and per-peer memory as an object source.

``MeshNode`` (node.py) is one agent's libp2p peer; ``MeshAgent`` (agent.py) puts what passes
through it in the store as ``message`` objects, keeps per-peer memory (memory.py) and queues
peers' requests for the agent's loop (queue.py). The wire format is in wire.py, private networks
in pnet.py. Importing this package does not import libp2p: a node does, when it is made.
"""
