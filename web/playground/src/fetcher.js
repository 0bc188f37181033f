import { createGraphiQLFetcher } from '@graphiql/toolkit';
import { parse } from 'graphql';
import { createClient } from 'graphql-ws';

// PLACEHOLDER is the Authorization value every tab starts with.
export const PLACEHOLDER = 'Bearer <paste your token>';

export const defaultHeaders = JSON.stringify({ Authorization: PLACEHOLDER }, null, 2);

// isPlaceholder tells an Authorization value that still asks for a token
// ("Bearer <paste your token>", "Bearer PASTE_THE_TOKEN_HERE", "") from a
// real one: TaskFlow's tokens are 43 characters of URL-safe base64, with no
// "<", ">" or spaces and not all capitals.
export function isPlaceholder(value) {
  const token = String(value).trim().replace(/^bearer\b/i, '').trim();
  return token === '' || /[<>\s]/.test(token) || /^PASTE_[A-Z_]*$/.test(token);
}

// isSubscription reports whether the operation to run (operationName, or the
// only one) of query is a subscription.
export function isSubscription(query, operationName) {
  try {
    const ops = parse(query).definitions.filter((d) => d.kind === 'OperationDefinition');
    const op = operationName ? ops.find((d) => d.name && d.name.value === operationName) : ops[0];
    return !!op && op.operation === 'subscription';
  } catch {
    return false;
  }
}

// wsURL is the graphql-ws endpoint of the page's server: the same path as
// url, ws: or wss: as the page is http: or https:.
function wsURL(url) {
  const u = new URL(url, window.location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  return u.toString();
}

// makeFetcher returns GraphiQL's fetcher for the TaskFlow endpoint at url,
// with one convenience: the header editor is per tab, so a tab (or the schema
// introspection) whose Authorization header still holds the placeholder uses
// the token last pasted in any tab, and without one goes out anonymous instead
// of sending the placeholder (which the server would refuse as a bad token).
// Subscriptions go over graphql-ws at the same endpoint, one connection per
// Authorization (sent in connection_init, as browsers cannot set WebSocket
// headers); their results stream into the result pane until stopped.
export function makeFetcher(url) {
  const base = createGraphiQLFetcher({ url });
  const clients = new Map();
  const wsClient = (authorization) => {
    let c = clients.get(authorization);
    if (!c) {
      c = createClient({
        url: wsURL(url),
        lazy: true,
        connectionParams: authorization ? { Authorization: authorization } : {},
      });
      clients.set(authorization, c);
    }
    return c;
  };
  let lastAuthorization = null;
  return (params, opts = {}) => {
    const headers = { ...(opts.headers || {}) };
    const key = Object.keys(headers).find((k) => k.toLowerCase() === 'authorization');
    const value = key === undefined ? undefined : String(headers[key]).trim();
    if (value === undefined || isPlaceholder(value)) {
      if (key !== undefined) delete headers[key];
      if (lastAuthorization !== null) headers.Authorization = lastAuthorization;
    } else {
      lastAuthorization = value;
    }
    if (isSubscription(params.query, params.operationName)) {
      return wsClient(headers.Authorization || '').iterate({
        query: params.query,
        variables: params.variables,
        operationName: params.operationName || undefined,
      });
    }
    return base(params, { ...opts, headers });
  };
}
