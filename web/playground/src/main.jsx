import React from 'react';
import { createRoot } from 'react-dom/client';
import { GraphiQL } from 'graphiql';
import 'graphiql/style.css';
import './playground.css';
import { examples } from './examples.js';
import { defaultHeaders, makeFetcher } from './fetcher.js';

const fetcher = makeFetcher('/query');

const tabs = examples.map((tab) => ({ ...tab, headers: defaultHeaders }));

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
