import { createGraphiQLFetcher } from '@graphiql/toolkit';

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

// makeFetcher returns GraphiQL's fetcher for the TaskFlow endpoint at url,
// with one convenience: the header editor is per tab, so a tab (or the schema
// introspection) whose Authorization header still holds the placeholder uses
// the token last pasted in any tab, and without one goes out anonymous instead
// of sending the placeholder (which the server would refuse as a bad token).
export function makeFetcher(url) {
  const base = createGraphiQLFetcher({ url });
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
    return base(params, { ...opts, headers });
  };
}
