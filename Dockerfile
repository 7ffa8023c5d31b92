# The control plane image: web (uvicorn), worker and beat run from it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml ./
COPY agent ./agent
COPY llmgw ./llmgw
COPY templates ./templates
COPY static ./static
COPY manage.py ./
RUN pip install --no-cache-dir ./agent . && python manage.py collectstatic --noinput -v0
EXPOSE 8000
# On SIGTERM uvicorn finishes the requests in flight; an agent stream's
# channel-layer receive can outlast a first cancel, so what is left after
# 5 s is cancelled again and the process exits, within docker's 10 s grace
# (deploy/rolling-upgrade.sh restarts each web process so).
CMD ["uvicorn", "llmgw.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--timeout-graceful-shutdown", "5"]
