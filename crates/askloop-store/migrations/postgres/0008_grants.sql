-- Approvals that stick: a person approving a call let later calls of the
-- same tool run without asking, in the same thread (`scope` 'thread') or
-- in every thread of the same resource ('resource'). A grant is inserted
-- in the transaction of the run write that records the approval making
-- it, so an approval that lost its compare-and-set grants nothing. Its id
-- is `{run_id}:{tool_call_id}` of that approval.
--
-- `args` holds the only arguments it covers (NULL: any); `mcp_server` the
-- MCP server of the tool (NULL: not an MCP tool): the same tool name of
-- another server is not covered. `expires_at` NULL: until revoked. A
-- revoked grant keeps its row with who revoked it and when.
--
-- Runs that record a grant are written at layout version 5, so an askloop
-- that does not know grants refuses them instead of misreading them.

CREATE TABLE grants (
    id TEXT COLLATE "C" PRIMARY KEY,
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    mcp_server TEXT,
    scope TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    args JSONB,
    granted_via TEXT NOT NULL,
    granted_by TEXT,
    granted_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ,
    run_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    revoked_at TIMESTAMPTZ,
    revoked_via TEXT,
    revoked_by TEXT
);

-- What a run's model call reads: the grants of its agent and resource
-- that are not revoked (expiry is checked on the few rows found).
CREATE INDEX grants_live ON grants (agent_id, resource_id) WHERE revoked_at IS NULL;
-- Listings, newest first.
CREATE INDEX grants_by_time ON grants (granted_at DESC, id DESC);
CREATE INDEX grants_by_resource ON grants (resource_id, granted_at DESC, id DESC);
