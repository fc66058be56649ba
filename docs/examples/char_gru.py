"""A character GRU on Shakespeare's plays: FedAvg under WaitAll and FedBuff on a fast/slow fleet."""

from torch import Tensor, nn

import simfl
from simfl import Fleet, Profile, Scenario, compare, dists, policies
from simfl.neural import SGD, Natural, NeuralFedAvg, Plays, Supervised


class CharGRU(nn.Module):
    """Embed each character, run a GRU over the window, predict every next character."""

    def __init__(self, vocab: int = 81, embed: int = 16, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: Tensor) -> Tensor:
        """Logits (B, T, vocab) of each position's next character, from ids (B, T)."""
        h, _ = self.gru(self.embed(x))
        return self.out(h)


def scenarios(clients=60, per_round=10, rounds=30, max_chars=10000, plays=None, seed=0) -> dict:
    """FedAvg of the GRU, one client per speaking role; a fifth of the devices 10x slower."""
    fast, slow = Profile(dists.Exponential(mean=1.0)), Profile(dists.Exponential(mean=10.0))
    fleet = Fleet.tiers((clients - clients // 5, fast), (clients // 5, slow))  # clients >= 5
    text = Plays(plays=plays, max_clients=clients, max_chars=max_chars)  # the largest roles
    task = Supervised(text, Natural(), CharGRU, eval_clients=20)  # Plays' kind: next_token
    fedavg = NeuralFedAvg(epochs=1, optimizer=SGD(lr=1.0, momentum=0.5, batch_size=16))
    kw = dict(task=task, algorithm=fedavg, fleet=fleet, rounds=rounds, seed=seed)
    both = (policies.WaitAll(count=per_round), policies.FedBuff(per_round, 2 * per_round))
    return {p.name: Scenario(policy=p, **kw) for p in both}


def main(target: float = 0.3, **size) -> dict:
    """Run both policies; print each one's next-character accuracy and time to ``target``."""
    runs = {name: simfl.run(sc, progress=False) for name, sc in scenarios(**size).items()}
    for name, res in runs.items():
        t = compare.time_to_target(res, "accuracy", above=target)  # inf: never reached
        print(f"{name}: final accuracy {res.final()['accuracy']:.3f}, time to {target}: {t:.1f} s")
    return runs


if __name__ == "__main__":
    main()
