// Sends files to TaskFlow the way a web or mobile app does: Apollo Client with
// apollo-upload-client's link (the GraphQL multipart request specification),
// then downloads them with fetch. Run by e2e/upload_test.go:
//   node upload.mjs <url of /query>
// with TOKEN (a member's bearer token) and TASK (a task id) in the environment.
// Prints one JSON object: what the server answered and what came back.
import { ApolloClient, InMemoryCache, gql } from '@apollo/client/core/index.js';
import createUploadLink from 'apollo-upload-client/createUploadLink.mjs';
import { createHash, randomBytes } from 'node:crypto';

const [endpoint] = process.argv.slice(2);
const { TOKEN, TASK } = process.env;

const client = new ApolloClient({
  cache: new InMemoryCache(),
  link: createUploadLink({
    uri: endpoint,
    // Required by TaskFlow for multipart requests (CSRF): Apollo's header.
    headers: { Authorization: `Bearer ${TOKEN}`, 'Apollo-Require-Preflight': 'true' },
  }),
});

const ADD = gql`
  mutation Add($task: ID!, $file: Upload!, $key: String) {
    addAttachment(taskId: $task, file: $file, idempotencyKey: $key) {
      id filename contentType size sha256 downloadUrl
    }
  }
`;

// A PNG signature, then random bytes: the server must sniff image/png, not
// take the text/plain the client claims.
const bytes = Buffer.concat([Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'), randomBytes(300 * 1024)]);
const file = new File([bytes], 'screenshot.png', { type: 'text/plain' });
const key = `e2e-${Date.now()}`;

async function add(f, k) {
  const res = await client.mutate({ mutation: ADD, variables: { task: TASK, file: f, key: k }, fetchPolicy: 'no-cache' });
  return res.data.addAttachment;
}

const first = await add(file, key);
const retry = await add(file, key);
let reused = null;
try {
  await add(new File([Buffer.from('other bytes')], 'screenshot.png'), key);
} catch (e) {
  reused = e.graphQLErrors?.[0]?.extensions?.code ?? String(e);
}

const url = new URL(first.downloadUrl, endpoint);
const whole = await fetch(url);
const body = Buffer.from(await whole.arrayBuffer());
const part = await fetch(url, { headers: { Range: 'bytes=8-15' } });
const partBody = Buffer.from(await part.arrayBuffer());

console.log(JSON.stringify({
  first,
  retryId: retry.id,
  reused,
  localSha256: createHash('sha256').update(bytes).digest('hex'),
  size: bytes.length,
  download: {
    status: whole.status,
    sha256: createHash('sha256').update(body).digest('hex'),
    contentType: whole.headers.get('content-type'),
    disposition: whole.headers.get('content-disposition'),
    nosniff: whole.headers.get('x-content-type-options'),
    etag: whole.headers.get('etag'),
  },
  range: { status: part.status, hex: partBody.toString('hex'), want: bytes.subarray(8, 16).toString('hex') },
}));
