"""The PS master (`python -m kubetrain.ps.master`): cuts the data into tasks, hands them out, keeps
durable books (taskbook, results, ledger, state), talks to every shard (shard_clients) and writes the outputs."""
