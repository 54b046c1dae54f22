-- flow-link: links the jobs of a flow just stored by enqueue.sql, in the same transaction:
-- parents wait for their children, children name their parent, and one outcome row per (parent,
-- child) awaits the child's settle (see the triggers of migration 0003).
--
-- $1 job id text[]    $2 children int[] (0: not a parent)    $3 policy text[] ('fail' | 'continue')
-- $4 parent id text[] (NULL: the root)    $5 parent queue text[]    $6 position int[]
-- $7 queue text[]    $8 name text[]
-- Element i of every array describes node i of the flow.
--
-- Returns one row: (linked bigint), the jobs updated. One UPDATE for all nodes, since a node in
-- the middle of a nested flow is both a parent and a child (a row may change once per statement).
WITH nodes AS (
  SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[])
    AS n(id, children, policy, parent_id, parent_queue, position, queue, name)
),
linked AS (
  UPDATE {{schema}}.jobs AS j
  SET state = CASE WHEN n.children > 0 THEN 'waiting-children' ELSE j.state END,
      pending_children = n.children,
      on_child_failure = CASE WHEN n.children > 0 THEN n.policy END,
      parent_id = n.parent_id,
      parent_queue = n.parent_queue
  FROM nodes n
  WHERE j.id = n.id
  RETURNING 1
),
outcomes AS (
  INSERT INTO {{schema}}.flow_children (parent_id, child_id, position, child_queue, child_name)
  SELECT parent_id, id, position, queue, name FROM nodes WHERE parent_id IS NOT NULL
)
SELECT count(*) AS linked FROM linked
