package resolvers

// AuditExportDownloadPath is the path of an export's file on this server
// (GET /audit/exports/{id}, package httpapi): AuditExport.downloadUrl.
func AuditExportDownloadPath(id string) string { return "/audit/exports/" + id }
