"""Distributed runs: a master hands each worker its share of one global schedule; workers ship records back in
batches (:mod:`llmload.core.messages`); the master keeps every record it received, notices dead workers, and
re-assigns what they had not sent yet. Every message is listed in docs/design.md, "Distributed protocol"::

    master -> worker   llm_challenge {nonce}                       (with a cluster token: prove you know it)
    worker -> master   llm_auth      {proof}                       HMAC-SHA256(token, nonce + worker id)
    master -> worker   llm_job      {run, start_wall, items: [[index, offset, prompt, prompt_len, output_len,
                                     request_id]...], max_concurrency, stop_timeout}
    master -> worker   llm_stop     {force}                        force: cut off what is in flight now
    master -> worker   llm_revoke   {indices, resume}              requests moved elsewhere; resume: go on
    worker -> master   llm_resumed  {}                             this worker was frozen (SIGSTOP, swap): may I?
    worker -> master   llm_records  {records, dispatched, clock}   the one record batch schema
    worker -> master   llm_done     {records, leaving, health}     leaving: stopped by a signal to the worker

Workers get jobs (and with them the API key) only once authenticated: with a cluster token set
(``LLMLOAD_CLUSTER_TOKEN`` or ``--cluster-token-file``) a worker must answer the master's challenge; a stranger
that connects is told to quit. Without a token every worker that connects is trusted.
"""

from llmload.core.messages import clock_offset, shift_record
from llmload.core.protocol import FREEZE_S, auth_proof
from llmload.distributed.master import BenchMaster, MasterResult, WorkerState, split_concurrency
from llmload.distributed.worker import BenchWorker

__all__ = ["FREEZE_S", "BenchMaster", "BenchWorker", "MasterResult", "WorkerState", "auth_proof", "clock_offset",
           "shift_record", "split_concurrency"]
