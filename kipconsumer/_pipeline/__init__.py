"""The parts of :class:`~kipconsumer.streams.Pipeline` (the public module is ``kipconsumer.streams``).

One module per job:

* ``context``: :class:`~kipconsumer._pipeline.context.PipelineContext`, what the pipeline shares with
  its guarantee and tasks (the sink, flow control, the call budget, the one producer slot, the
  consumer, a read-only view of the tasks), built once by the pipeline and passed to their
  constructors; nothing in this package holds the pipeline itself.
* ``budget``: :class:`~kipconsumer._pipeline.budget.CallBudget`, KIP-572's 50% rule for the blocking
  calls of a loop pass.
* ``task``: :class:`~kipconsumer._pipeline.task.PartitionTask` and the
  :class:`~kipconsumer._pipeline.task.DeliveryGuarantee` protocol.
* ``at_least_once``: the default guarantee.
* ``exactly_once`` (``exactly_once_v2``) around ``transaction``, its one transaction.
"""
