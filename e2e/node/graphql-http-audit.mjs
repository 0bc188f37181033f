// graphql-http-audit.mjs runs the GraphQL-over-HTTP audit suite of the npm
// graphql-http package against a server's GraphQL endpoint and prints one JSON
// line per audit: {id, name, level, status, reason?, httpStatus?, contentType?, body?}.
// status is "ok", or "error" (a failed MUST), "warn" (a failed SHOULD) or
// "notice" (a failed MAY). The exit code is 0 whatever the results: judging
// them is the caller's job (e2e/graphqlhttp_test.go).
//
// usage: node graphql-http-audit.mjs http://127.0.0.1:PORT/query
import { auditServer } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node graphql-http-audit.mjs <graphql endpoint url>');
  process.exit(2);
}

const results = await auditServer({ url });
for (const r of results) {
  const line = { id: r.id, name: r.name, level: r.name.split(' ')[0], status: r.status };
  if (r.status !== 'ok') {
    line.reason = r.reason;
    if (r.response) {
      line.httpStatus = r.response.status;
      line.contentType = r.response.headers.get('content-type');
      try {
        line.body = (await r.response.text()).slice(0, 500);
      } catch (err) {
        line.body = `(body already read: ${err.message})`;
      }
    }
  }
  console.log(JSON.stringify(line));
}
