from django.urls import path

from teams.web import eval_pages, time_travel, views

urlpatterns = [
    path("", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_live, name="team-live"),
    path("teams/<slug:slug>/action/", views.team_action, name="team-action"),
    path("teams/<slug:slug>/post/", views.team_post, name="team-post"),
    path("teams/<slug:slug>/steer/", views.team_steer, name="team-steer"),
    path("teams/<slug:slug>/run-again/", views.team_run_again, name="team-run-again"),
    path("teams/<slug:slug>/drift/", views.team_drift, name="team-drift"),
    path(
        "teams/<slug:slug>/turns/<int:turn_id>/notes/",
        views.team_turn_notes,
        name="team-turn-notes",
    ),
    path("teams/<slug:slug>/files/", views.team_files, name="team-files"),
    path("teams/<slug:slug>/files/view/", views.team_file, name="team-file"),
    path("teams/<slug:slug>/fork/", time_travel.team_fork, name="team-fork"),
    path(
        "teams/<slug:slug>/files/history/",
        time_travel.team_file_history,
        name="team-file-history",
    ),
    path(
        "teams/<slug:slug>/compare/<slug:other>/",
        time_travel.team_compare,
        name="team-compare",
    ),
    path("pm/", views.pm_inbox, name="pm-inbox"),
    path("pm/<int:request_id>/answer/", views.pm_answer, name="pm-answer"),
    path("evals/", eval_pages.eval_list, name="eval-list"),
    path("evals/<int:run_id>/", eval_pages.eval_run, name="eval-run"),
    path(
        "evals/<int:run_id>/compare/<int:other>",
        eval_pages.eval_compare,
        name="eval-compare",
    ),
]
