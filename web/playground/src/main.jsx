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
      visiblePlugin="Documentation Explorer"
    >
      <GraphiQL.Logo>TaskFlow</GraphiQL.Logo>
    </GraphiQL>
  );
}

createRoot(document.getElementById('graphiql')).render(<Playground />);
