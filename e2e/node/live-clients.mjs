// live-clients.mjs subscribes to TaskFlow's taskChanges with the real
// clients browsers use, graphql-ws (WebSocket, graphql-transport-ws) and
// graphql-sse (Server-Sent Events, distinct connections mode), and for each:
// loads the project's tasks with changesCursor and subscribes from that
// cursor, as a live view does (docs/api.md, Subscriptions, Cursors); sees
// tasks created through the API arrive; stops; lets more tasks be
// created; subscribes again with the last cursor and gets the missed ones,
// then a live one; finally logs the token out and sees the stream end with
// UNAUTHENTICATED. It prints one JSON object on stdout; the assertions are
// made by the Go test (e2e/live_test.go).
//
// usage: node live-clients.mjs <base url> <token of graphql-ws> <token of graphql-sse> <project id>
import { createClient as createWSClient } from 'graphql-ws';
import { createClient as createSSEClient } from 'graphql-sse';
import WebSocket from 'ws';

const [baseURL, wsToken, sseToken, projectId] = process.argv.slice(2);
if (!projectId) {
  console.error('usage: node live-clients.mjs <base url> <ws token> <sse token> <project id>');
  process.exit(2);
}
const url = baseURL + '/query';
const query = `subscription($p: ID!, $after: String) { taskChanges(projectId: $p, after: $after) { cursor action taskId task { title } } }`;

async function post(token, q, variables) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: q, variables }),
  });
  const body = await res.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

const createTask = async (token, title) =>
  (await post(token, `mutation($p: ID!, $t: String!) { createTask(input: {projectId: $p, title: $t}) { id } }`,
    { p: projectId, t: title })).createTask.id;

// stream turns a client's subscribe into a queue of results, with the error
// or completion that ends it.
function stream(client, variables) {
  const items = [];
  const waiters = [];
  let end = null;
  const wake = () => { while (waiters.length) waiters.shift()(); };
  const dispose = client.subscribe({ query, variables }, {
    next: (r) => { items.push(r); wake(); },
    error: (e) => { end = { error: e }; wake(); },
    complete: () => { end = end || { complete: true }; wake(); },
  });
  return {
    dispose,
    // next returns the next result, or null once the stream ended.
    async next(ms = 30_000) {
      const deadline = Date.now() + ms;
      while (!items.length && !end) {
        if (Date.now() > deadline) throw new Error('no result within ' + ms + ' ms');
        await new Promise((r) => { waiters.push(r); setTimeout(r, 200); });
      }
      return items.length ? items.shift() : null;
    },
    ended: () => end,
  };
}

// errorCodes are the extensions.code of an error or close the client reported.
function errorCodes(end, last) {
  const codes = [];
  const e = end && end.error;
  if (Array.isArray(e)) e.forEach((x) => codes.push(x.extensions && x.extensions.code));
  else if (e && e.code) codes.push('close ' + e.code);
  else if (e) codes.push(String(e.message || e));
  if (last && last.errors) last.errors.forEach((x) => codes.push(x.extensions && x.extensions.code));
  return codes;
}


const out = { results: [] };
try {
  const wsClient = createWSClient({
    url: url.replace(/^http/, 'ws'),
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${wsToken}` },
    retryAttempts: 0,
  });
  const sseClient = createSSEClient({ url, headers: { Authorization: `Bearer ${sseToken}` }, retryAttempts: 0 });
  for (const [name, client, token] of [['graphql-ws', wsClient, wsToken], ['graphql-sse', sseClient, sseToken]]) {
    out.results.push(await exercise(name, client, token));
  }
  await wsClient.dispose();
  sseClient.dispose();
} catch (err) {
  out.error = String(err && err.stack ? err.stack : err);
}
console.log(JSON.stringify(out));
process.exit(0);

// exercise runs the scenario with one client.
async function exercise(name, client, token) {
  const r = { name };
  // The cursor is taken before the data is read: from it the stream misses
  // nothing the data does not show, however late the server takes the
  // subscribe. Items of tasks the data shows may come again: skipped.
  const board = await post(token, `query($p: ID!) { changesCursor project(id: $p) { tasks(first: 100) { nodes { id } } } }`,
    { p: projectId });
  const shown = new Set(board.project.tasks.nodes.map((n) => n.id));
  let s = stream(client, { p: projectId, after: board.changesCursor });
  let cursor = null;
  r.live = [];
  for (const title of ['a', 'b']) {
    const id = await createTask(token, `${name} ${title}`);
    let c;
    do c = (await s.next()).data.taskChanges; while (shown.has(c.taskId));
    r.live.push({ sent: id, got: c.taskId, action: c.action, title: c.task && c.task.title });
    cursor = c.cursor;
  }
  s.dispose();
  r.missedSent = [];
  for (const title of ['c', 'd', 'e']) r.missedSent.push(await createTask(token, `${name} ${title}`));
  s = stream(client, { p: projectId, after: cursor });
  r.resumed = [];
  for (let i = 0; i < 3; i++) r.resumed.push((await s.next()).data.taskChanges.taskId);
  r.liveAfterSent = await createTask(token, `${name} f`);
  r.liveAfter = (await s.next()).data.taskChanges.taskId;
  await post(token, 'mutation { logout }', {});
  const lastResult = await s.next();
  r.afterLogout = errorCodes(s.ended(), lastResult);
  r.ended = !!(s.ended() || (await s.next(5000).catch(() => 'open')) === null);
  return r;
}
