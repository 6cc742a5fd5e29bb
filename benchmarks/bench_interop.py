"""Workloads and fabrics from elsewhere: a training step written as Chakra traces and read
back (Llama 3 70B, TP 8, PP 4, DP 4 on 16 HGX H100 boards: 128 ranks, 20,480 trace nodes),
and a fabric built from ibnetdiscover output of a rail-optimised two-tier cluster (256 hosts x
8 HCAs on 64 leaves and 32 spines, 4,096 cables)."""

import os
import tempfile

import fabricsim as fs


class ChakraTraces:
    number = 1
    repeat = (3, 10, 60.0)
    warmup_time = 0

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
        self.step = fs.TrainingStep("llama3-70b", fs.Parallelism(tp=8, pp=4, dp=4, global_batch_size=64), self.fabric)
        self.dir = tempfile.mkdtemp()
        fs.chakra.write(self.step, os.path.join(self.dir, "read"))

    def time_write(self):
        fs.chakra.write(self.step, os.path.join(self.dir, "written"))

    def time_load(self):
        fs.chakra.load(os.path.join(self.dir, "read"), self.fabric)


def _cabling(n_hosts=256, hcas=8, leaves=64, spines=32):
    """ibnetdiscover's lines for HCA k of each host on rail k's leaves, every leaf cabled once
    to every spine (leaf ports 1-32 down, 33-64 up)."""
    hosts_per_leaf = n_hosts * hcas // leaves
    blocks = {}  # guid -> (header, [port lines])

    def add(guid, port, peer, peer_port, peer_desc):
        letter = "S" if peer >> 56 == 0xB8 else "H"
        blocks[guid][1].append(f'[{port}]\t"{letter}-{peer:016x}"[{peer_port}]\t\t# "{peer_desc}" lid 1 4xNDR')

    leaf = [0xB800000000000000 + i for i in range(leaves)]
    spine = [0xB800010000000000 + i for i in range(spines)]
    for i, g in enumerate(leaf):
        blocks[g] = (f'Switch\t64 "S-{g:016x}"\t\t# "leaf{i}" enhanced port 0 lid 1 lmc 0', [])
    for i, g in enumerate(spine):
        blocks[g] = (f'Switch\t64 "S-{g:016x}"\t\t# "spine{i}" enhanced port 0 lid 1 lmc 0', [])
    for h in range(n_hosts):
        for k in range(hcas):
            g = 0x0C00000000000000 + h * 16 + k
            blocks[g] = (f'Ca\t1 "H-{g:016x}"\t\t# "node{h:03d} mlx5_{k}"', [])
            slot = (k * n_hosts + h)
            lf, port = slot // hosts_per_leaf, slot % hosts_per_leaf + 1
            add(g, 1, leaf[lf], port, f"leaf{lf}")
            add(leaf[lf], port, g, 1, f"node{h:03d} mlx5_{k}")
    for i, lg in enumerate(leaf):
        for j, sg in enumerate(spine):
            add(lg, 33 + j, sg, i + 1, f"spine{j}")
            add(sg, i + 1, lg, 33 + j, f"leaf{i}")
    return "\n\n".join(head + "\n" + "\n".join(lines) for head, lines in blocks.values()) + "\n"


class Cabling:
    number = 1
    repeat = (3, 10, 60.0)
    warmup_time = 0

    def setup(self):
        self.text = _cabling()

    def time_from_ibnetdiscover(self):
        fs.Topology.from_ibnetdiscover(self.text, nvlink="hgx-h100")
