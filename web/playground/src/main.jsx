import React from 'react';
import { createRoot } from 'react-dom/client';
import { GraphiQL } from 'graphiql';
import 'graphiql/style.css';
import './playground.css';
import { examples } from './examples.js';
import { defaultHeaders, makeFetcher } from './fetcher.js';

const fetcher = makeFetcher('/query');

// The server may hand the example tabs in a JSON data block (see
// httpapi/playground.New); without one the bundle's own examples open.
function serverTabs() {
  const el = document.getElementById('taskflow-tabs');
  if (!el) return null;
  try {
    const tabs = JSON.parse(el.textContent);
    if (!Array.isArray(tabs) || tabs.length === 0) return null;
    return tabs
      .filter((t) => t && typeof t.query === 'string')
      .map((t) => ({ query: t.query, variables: t.variables || undefined, headers: t.headers || undefined }));
  } catch (err) {
    console.warn('taskflow-tabs is not valid JSON; using the built-in examples', err);
    return null;
  }
}

const tabs = (serverTabs() ?? examples).map((tab) => ({ ...tab, headers: tab.headers ?? defaultHeaders }));

function Playground() {
  return (
    <GraphiQL
      fetcher={fetcher}
      defaultTabs={tabs}
      defaultHeaders={defaultHeaders}
      defaultEditorToolsVisibility="headers"
      isHeadersEditorEnabled
      shouldPersistHeaders={false}
    >
      <GraphiQL.Logo>TaskFlow</GraphiQL.Logo>
    </GraphiQL>
  );
}

createRoot(document.getElementById('graphiql')).render(<Playground />);

// Open the documentation explorer once, as a click on its sidebar button
// does. (GraphiQL 4's visiblePlugin prop marks the plugin visible but leaves
// its pane collapsed on first render.)
function openDocs(framesLeft) {
  const button = document.querySelector('.graphiql-sidebar button[aria-label="Show Documentation Explorer"]');
  if (button) {
    button.click();
  } else if (framesLeft > 0) {
    requestAnimationFrame(() => openDocs(framesLeft - 1));
  }
}
openDocs(600);
