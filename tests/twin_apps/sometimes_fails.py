"""A Flower ClientApp (Message API) that fails on one partition: plain Flower, no simfl."""

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Reply with the partition's example count; partition 2 raises."""
    partition = int(context.node_config["partition-id"])
    if partition == 2:
        raise RuntimeError("partition 2 ran out of memory")
    metrics = MetricRecord({"num-examples": 10 + partition})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
