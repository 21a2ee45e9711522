-- 0016_supervised_processes: background processes with a restart policy,
-- kept so that the engine starts them again at every boot of their
-- sandbox (start after stop, wake, restart after a host reboot). spec is
-- the request as given (JSON: cmd, env, workdir, user, tag, restart
-- policy, ready port): the request's own env, never a secret's value
-- (secrets are references of the sandbox, resolved at each start). boot
-- and agent_id name the run of the current boot. Rows go with their
-- sandbox's delete.
CREATE TABLE supervised_processes (
    sandbox_id  TEXT   NOT NULL,
    proc_key    TEXT   NOT NULL,
    spec        TEXT   NOT NULL,
    boot        TEXT   NOT NULL DEFAULT '',
    agent_id    TEXT   NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox_id, proc_key)
);
