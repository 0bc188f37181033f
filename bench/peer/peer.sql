-- The peer's additions to a TaskFlow database (bench/peer): PostGraphile 5
-- serves TaskFlow's own tables (schema public) and this schema. No table,
-- row or index of TaskFlow changes; the harness runs this in its own bench
-- database, which it drops at the end.

CREATE SCHEMA IF NOT EXISTS peer;

-- search_tasks is the work of TaskFlow's searchTasks (store.SearchTasks): the
-- same predicate and order over the same index, as a function PostGraphile
-- exposes as the query field searchTasks(ws:, q:) (a connection: first,
-- pageInfo). It is inlinable (SQL, STABLE, one SELECT), so Postgres plans it
-- inside PostGraphile's query as it plans TaskFlow's.
CREATE OR REPLACE FUNCTION peer.search_tasks(ws uuid, q text) RETURNS SETOF public.tasks
LANGUAGE sql STABLE AS $$
    SELECT t.*
    FROM public.tasks t, websearch_to_tsquery('english', q) AS query(q)
    WHERE t.workspace_id = ws AND t.search @@ query.q
    ORDER BY ts_rank(t.search, query.q) DESC, t.created_at DESC, t.id DESC
$$;

-- TaskFlow's tasks.assignee_id references members (workspace_id, user_id); its
-- API answers assignee { id name } from users. This smart tag gives
-- PostGraphile that relation (Task.userByAssigneeId), so both read the
-- assignee's name with one lookup of users by primary key.
COMMENT ON TABLE public.tasks IS E'@foreignKey (assignee_id) references public.users (id)';
