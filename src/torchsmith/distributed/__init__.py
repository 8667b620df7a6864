"""Multi-process training under torchrun: the DDP / ZeRO-1 / FSDP2 wraps, DCP checkpoints, launch, desync checks.

Modules:
    alpha_beta    the alpha-beta (latency-bandwidth) cost of ring collectives, and its fit to measured times
    checkpoint    DistCheckpointer: torch.distributed.checkpoint (DCP) saves, one directory per step
    collective_bench bench_collectives: time all_reduce / all_gather / reduce_scatter in the live group
    commcount     count_collectives: the collectives a training step issues, and their bytes
    ddp           DistributedDataParallel: a full replica per rank, gradients all-reduced in backward
    desync        check_desync: all-gather parameter checksums and name the replicas that drifted
    fsdp2         FSDP2: fully_shard each block, then the root
    launch        the torchrun command behind ``torchsmith launch``
    runtime       the process group under torchrun: init from the environment, batch sharding, agreed flags
    safe_metadata DCP's .metadata read without letting it run code
    scale_model   predict step time and per-rank peak memory of DDP / ZeRO-1 / FSDP2 at N ranks from 1 rank
    strategy      the distributed wrap picked from Plan.parallel: Single, DDP, ZeRO-1 or FSDP2
    zero1         ZeRO-1: DDP for the gradients, ZeroRedundancyOptimizer for the optimizer state
"""
