"""The Seneca paper's Table 6 view: MDP's best split per server and dataset.

Run: ``.venv/bin/python notebooks/mdp_table6.py``. Uses the shipped example specs (Table 5
node values) with the evaluation's cache sizes (§7: 115 GB in-house, 400 GB AWS and Azure) and
Table 6's datasets, and prints the paper's split next to both of our models (the shared one
with 1 job and with 3 concurrent jobs, ``cluster.jobs``).
"""

from mdp import load_spec, plan

CACHE_GB = {"inhouse": 115, "inhouse-x2": 115, "aws-p3.8xlarge": 400, "azure-nc96ads-v4": 400}
DATASETS = {  # name: (images, mean KB, the paper's splits for the four servers above)
    "ImageNet-1K": (1_281_167, 114.62, ("58-42-0", "40-59-1", "0-81-19", "0-48-52")),
    "OpenImages": (1_900_000, 315.84, ("62-37-1", "58-41-1", "52-48-0", "5-95-0")),
    "ImageNet-22K": (14_000_000, 91.39, ("100-0-0",) * 4),
}


def main() -> None:
    print(
        "| spec, cache | dataset | paper Table 6 | `--model paper` | `--model shared` "
        "| `shared`, 3 jobs |"
    )
    print("|---|---|---|---|---|---|")
    for dataset, (images, kb, paper) in DATASETS.items():
        for (name, gb), theirs in zip(CACHE_GB.items(), paper, strict=True):
            spec = (
                load_spec(name)
                .replace("cache.size_gb", gb)
                .replace("dataset.samples", images)
                .replace("dataset.sample_kb", kb)
            )
            ours, shared = plan(spec, "paper"), plan(spec, "shared")
            three = plan(spec.replace("cluster.jobs", 3), "shared")
            print(
                f"| {name}, {gb} GB | {dataset} | {theirs} "
                f"| {ours.split_text()} ({ours.throughput:,.0f}/s) "
                f"| {shared.split_text()} ({shared.throughput:,.0f}/s, {shared.bound}) "
                f"| {three.split_text()} ({three.throughput:,.0f}/s, {three.bound}) |"
            )


if __name__ == "__main__":
    main()
