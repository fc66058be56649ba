"""A small ResNet on Fashion-MNIST: FedAvg under WaitAll and FedBuff on a fast/slow fleet."""

from torch import Tensor, nn

import simfl
from simfl import Fleet, Profile, Scenario, compare, dists, policies
from simfl.neural import SGD, Dirichlet, FashionMNIST, ImageClassification, NeuralFedAvg


class Block(nn.Module):
    """Two 3x3 convolutions with GroupNorm (the first halves the image) and a 1x1 shortcut."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.GroupNorm(4, cout)
        self.conv2, self.norm2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.GroupNorm(4, cout)
        self.skip = nn.Conv2d(cin, cout, 1, stride=2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """The two convolutions' path plus the shortcut, through a ReLU."""
        h = self.norm1(self.conv1(x)).relu()
        return (self.norm2(self.conv2(h)) + self.skip(x)).relu()


class ResNet(nn.Module):
    """1x28x28 images -> 16x28x28 -> blocks to 16x14x14 and 32x7x7 -> 10 class logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.ReLU(), Block(16, 16), Block(16, 32))
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits of a batch of images."""
        return self.fc(self.net(x).flatten(1))


def scenarios(clients=100, per_round=10, rounds=30, limit=20000, seed=0) -> dict:
    """FedAvg of the ResNet under WaitAll and FedBuff; a fifth of the devices 10x slower."""
    fast, slow = Profile(dists.Exponential(mean=1.0)), Profile(dists.Exponential(mean=10.0))
    fleet = Fleet.tiers((clients - clients // 5, fast), (clients // 5, slow))  # clients >= 5
    task = ImageClassification(FashionMNIST(limit=limit), Dirichlet(0.5), ResNet, eval_clients=20)
    fedavg = NeuralFedAvg(epochs=1, optimizer=SGD(lr=0.02, momentum=0.5, batch_size=32))
    kw = dict(task=task, algorithm=fedavg, fleet=fleet, rounds=rounds, seed=seed)
    both = (policies.WaitAll(count=per_round), policies.FedBuff(per_round, 2 * per_round))
    return {p.name: Scenario(policy=p, **kw) for p in both}


def main(target: float = 0.7, **size) -> dict:
    """Run both policies; print each one's final accuracy and time to ``target`` accuracy."""
    runs = {name: simfl.run(sc, progress=False) for name, sc in scenarios(**size).items()}
    for name, res in runs.items():
        t = compare.time_to_target(res, "accuracy", above=target)  # inf: never reached
        print(f"{name}: final accuracy {res.final()['accuracy']:.3f}, time to {target}: {t:.1f} s")
    return runs


if __name__ == "__main__":
    main()
